// JSON encodings of Distribution, StepShape, EngineLimits, StepCostModel and Request.
#include "hotpass/traffic/json_codec.h"

#include <cmath>

namespace hp::traffic {

double round_significant(double value, int digits) {
    if (value == 0 || !std::isfinite(value)) return value;
    const double scale = std::pow(10.0, digits - 1 - int(std::floor(std::log10(std::abs(value)))));
    return std::round(value * scale) / scale;
}

void to_json(nlohmann::json &json, const Distribution &distribution) {
    nlohmann::json bins = nlohmann::json::array();
    for (const HistogramBin &bin : distribution.bins) bins.push_back({bin.lo, bin.hi, bin.count});
    json = {{"count", distribution.count}, {"mean", round_significant(distribution.mean)},
            {"min", distribution.min},     {"max", distribution.max},
            {"p50", distribution.p50},     {"p90", distribution.p90},
            {"p99", distribution.p99},     {"bins", bins}};
}

void from_json(const nlohmann::json &json, Distribution &distribution) {
    distribution = {};
    json.at("count").get_to(distribution.count);
    json.at("mean").get_to(distribution.mean);
    json.at("min").get_to(distribution.min);
    json.at("max").get_to(distribution.max);
    json.at("p50").get_to(distribution.p50);
    json.at("p90").get_to(distribution.p90);
    json.at("p99").get_to(distribution.p99);
    for (const nlohmann::json &bin : json.at("bins"))
        distribution.bins.push_back(
            {bin.at(0).get<uint64_t>(), bin.at(1).get<uint64_t>(), bin.at(2).get<uint64_t>()});
}

void to_json(nlohmann::json &json, const StepShape &shape) {
    nlohmann::json prefill = nlohmann::json::array();
    for (const PrefillChunk &chunk : shape.prefill)
        prefill.push_back({{"tokens", chunk.tokens}, {"kv_start", chunk.kv_start}});
    json = {{"decode", {{"batch", shape.decode_batch()}, {"kv_len", shape.decode_kv_len}}},
            {"prefill", prefill}};
}

void from_json(const nlohmann::json &json, StepShape &shape) {
    shape = {};
    const nlohmann::json &decode = json.at("decode");
    decode.at("kv_len").get_to(shape.decode_kv_len);
    if (decode.at("batch").get<uint32_t>() != shape.decode_kv_len.size())
        throw nlohmann::json::other_error::create(501, "decode.batch != size of decode.kv_len",
                                                  &json);
    for (const nlohmann::json &chunk : json.at("prefill"))
        shape.prefill.push_back(
            {chunk.at("tokens").get<uint32_t>(), chunk.at("kv_start").get<uint32_t>()});
}

void to_json(nlohmann::json &json, const EngineLimits &limits) {
    json = {{"max_batch", limits.max_batch}, {"max_batched_tokens", limits.max_batched_tokens}};
}

void from_json(const nlohmann::json &json, EngineLimits &limits) {
    json.at("max_batch").get_to(limits.max_batch);
    json.at("max_batched_tokens").get_to(limits.max_batched_tokens);
}

void to_json(nlohmann::json &json, const StepCostModel &cost) {
    json = {{"base_ms", cost.base_ms},
            {"per_token_ms", cost.per_token_ms},
            {"per_kv_token_ms", cost.per_kv_token_ms}};
}

void from_json(const nlohmann::json &json, StepCostModel &cost) {
    json.at("base_ms").get_to(cost.base_ms);
    json.at("per_token_ms").get_to(cost.per_token_ms);
    json.at("per_kv_token_ms").get_to(cost.per_kv_token_ms);
}

void to_json(nlohmann::json &json, const Request &request) {
    json = nlohmann::json::parse(request_to_jsonl(request));
}

void from_json(const nlohmann::json &json, Request &request) {
    Result<Request> parsed = request_from_jsonl(json.dump());
    if (!parsed.ok()) throw nlohmann::json::other_error::create(501, parsed.error(), &json);
    request = std::move(*parsed);
}

}  // namespace hp::traffic
