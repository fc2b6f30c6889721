// The hotpass request-log line: JSON with fixed field names (docs/traffic.md, "Request log").
#include "hotpass/traffic/request.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace hp::traffic {

std::string request_to_jsonl(const Request &request) {
    nlohmann::ordered_json line;
    line["arrival_s"] = std::round(request.arrival_s * 1e6) / 1e6;
    line["input_tokens"] = request.input_tokens;
    line["output_tokens"] = request.output_tokens;
    if (!request.prefix_hashes.empty()) {
        if (request.block_tokens != kDefaultBlockTokens)
            line["block_tokens"] = request.block_tokens;
        line["prefix_hashes"] = request.prefix_hashes;
    }
    if (!request.token_ids.empty()) line["token_ids"] = request.token_ids;
    if (request.ttft_ms >= 0) line["ttft_ms"] = request.ttft_ms;
    if (!request.itl_ms.empty()) line["itl_ms"] = request.itl_ms;
    if (!request.expert_tokens.empty()) line["expert_tokens"] = request.expert_tokens;
    return line.dump();
}

namespace {

Result<uint32_t> token_count(const nlohmann::json &row, const char *name, bool required,
                             uint32_t fallback = 0) {
    auto field = row.find(name);
    if (field == row.end()) {
        if (required) return error("{} is missing", name);
        return fallback;
    }
    if (field->is_number_integer() && field->get<int64_t>() < 0)
        return error("{} is negative ({})", name, field->get<int64_t>());
    if (!field->is_number_unsigned()) return error("{} is not an integer", name);
    if (field->get<uint64_t>() >= kMaxRequestTokens)
        return error("{} is implausibly large ({})", name, field->get<uint64_t>());
    return uint32_t(field->get<uint64_t>());
}

template <typename T, typename Check>
Status number_array(const nlohmann::json &row, const char *name, std::vector<T> &out, Check ok) {
    auto field = row.find(name);
    if (field == row.end()) return Status::success();
    if (!field->is_array()) return error("{} is not an array", name);
    out.reserve(field->size());
    for (const nlohmann::json &value : *field) {
        if (!ok(value)) return error("{} holds a bad value", name);
        out.push_back(value.get<T>());
    }
    return Status::success();
}

}  // namespace

Result<Request> request_from_jsonl(std::string_view text) {
    const nlohmann::json row = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) return error("not a JSON object");
    Request request;
    auto arrival = row.find("arrival_s");
    if (arrival == row.end()) return error("arrival_s is missing");
    if (!arrival->is_number() || !std::isfinite(arrival->get<double>()))
        return error("arrival_s is not a number");
    request.arrival_s = arrival->get<double>();
    Result<uint32_t> input = token_count(row, "input_tokens", true);
    HP_TRY(input);
    Result<uint32_t> output = token_count(row, "output_tokens", true);
    HP_TRY(output);
    Result<uint32_t> block = token_count(row, "block_tokens", false, kDefaultBlockTokens);
    HP_TRY(block);
    if (*input == 0) return error("input_tokens is 0");
    if (*block == 0) return error("block_tokens is 0");
    request.input_tokens = *input;
    request.output_tokens = *output;
    request.block_tokens = *block;
    const auto is_unsigned = [](const nlohmann::json &v) { return v.is_number_unsigned(); };
    const auto is_integer = [](const nlohmann::json &v) { return v.is_number_integer(); };
    const auto is_number = [](const nlohmann::json &v) { return v.is_number(); };
    HP_TRY(number_array(row, "prefix_hashes", request.prefix_hashes, is_unsigned));
    if (request.prefix_hashes.size() > (*input + *block - 1) / *block)
        return error("{} prefix_hashes for {} input tokens of {}-token blocks",
                     request.prefix_hashes.size(), *input, *block);
    HP_TRY(number_array(row, "token_ids", request.token_ids, is_integer));
    if (!request.token_ids.empty() && request.token_ids.size() != *input)
        return error("{} token_ids for input_tokens {}", request.token_ids.size(), *input);
    HP_TRY(number_array(row, "itl_ms", request.itl_ms, is_number));
    if (auto ttft = row.find("ttft_ms"); ttft != row.end()) {
        if (!ttft->is_number() || ttft->get<double>() < 0)
            return error("ttft_ms is not a duration");
        request.ttft_ms = ttft->get<double>();
    }
    if (auto experts = row.find("expert_tokens"); experts != row.end()) {
        if (!experts->is_array()) return error("expert_tokens is not an array");
        for (const nlohmann::json &layer : *experts) {
            if (!layer.is_array()) return error("expert_tokens is not [layer][expert]");
            std::vector<uint32_t> &counts = request.expert_tokens.emplace_back();
            for (const nlohmann::json &count : layer) {
                if (!count.is_number_unsigned()) return error("expert_tokens holds a bad count");
                counts.push_back(count.get<uint32_t>());
            }
        }
    }
    return request;
}

}  // namespace hp::traffic
