// Profile <-> JSON. Every field is written; reading requires the schema tag and the core fields
// and tolerates a missing batching / expert_load / sample_requests section.
#include "hotpass/traffic/profile_json.h"

#include "hotpass/core/mapped_file.h"
#include "hotpass/traffic/json_codec.h"

namespace hp::traffic {
namespace {

nlohmann::json cell_to_json(const StepCell &cell) {
    return {{"octaves", {cell.decode_batch_octave, cell.prefill_tokens_octave, cell.kv_len_octave}},
            {"steps", cell.steps},
            {"time_ms", round_significant(cell.time_ms)},
            {"tokens", cell.tokens},
            {"mean_decode_batch", round_significant(cell.mean_decode_batch)},
            {"mean_kv_len", round_significant(cell.mean_kv_len)},
            {"mean_prefill_tokens", round_significant(cell.mean_prefill_tokens)},
            {"representative", cell.representative}};
}

StepCell cell_from_json(const nlohmann::json &json) {
    StepCell cell;
    const nlohmann::json &octaves = json.at("octaves");
    cell.decode_batch_octave = octaves.at(0);
    cell.prefill_tokens_octave = octaves.at(1);
    cell.kv_len_octave = octaves.at(2);
    json.at("steps").get_to(cell.steps);
    json.at("time_ms").get_to(cell.time_ms);
    json.at("tokens").get_to(cell.tokens);
    json.at("mean_decode_batch").get_to(cell.mean_decode_batch);
    json.at("mean_kv_len").get_to(cell.mean_kv_len);
    json.at("mean_prefill_tokens").get_to(cell.mean_prefill_tokens);
    json.at("representative").get_to(cell.representative);
    return cell;
}

nlohmann::json batching_to_json(const BatchingSummary &batching) {
    nlohmann::json cells = nlohmann::json::array();
    for (const StepCell &cell : batching.cells) cells.push_back(cell_to_json(cell));
    return {{"simulated", batching.simulated},
            {"limits", batching.limits},
            {"cost_model", batching.cost},
            {"steps", batching.steps},
            {"busy_s", round_significant(batching.busy_s)},
            {"span_s", round_significant(batching.span_s)},
            {"tokens", batching.tokens},
            {"dropped_requests", batching.dropped_requests},
            {"concurrency", batching.concurrency},
            {"decode_batch", batching.decode_batch},
            {"decode_kv_len", batching.decode_kv_len},
            {"prefill_tokens", batching.prefill_tokens},
            {"ttft_ms", batching.ttft_ms},
            {"cells", cells}};
}

BatchingSummary batching_from_json(const nlohmann::json &json) {
    BatchingSummary batching;
    json.at("simulated").get_to(batching.simulated);
    if (!batching.simulated) return batching;
    json.at("limits").get_to(batching.limits);
    json.at("cost_model").get_to(batching.cost);
    json.at("steps").get_to(batching.steps);
    json.at("busy_s").get_to(batching.busy_s);
    json.at("span_s").get_to(batching.span_s);
    json.at("tokens").get_to(batching.tokens);
    json.at("dropped_requests").get_to(batching.dropped_requests);
    json.at("concurrency").get_to(batching.concurrency);
    json.at("decode_batch").get_to(batching.decode_batch);
    json.at("decode_kv_len").get_to(batching.decode_kv_len);
    json.at("prefill_tokens").get_to(batching.prefill_tokens);
    json.at("ttft_ms").get_to(batching.ttft_ms);
    for (const nlohmann::json &cell : json.at("cells"))
        batching.cells.push_back(cell_from_json(cell));
    return batching;
}

}  // namespace

std::string profile_to_json(const Profile &profile, int indent) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerExpertLoad &layer : profile.expert_load.layers)
        layers.push_back(
            {{"tokens", layer.tokens}, {"imbalance", round_significant(layer.imbalance)}});
    nlohmann::json json = {
        {"schema", kProfileSchema},
        {"source", profile.source},
        {"format", profile.format},
        {"requests", profile.requests},
        {"bad_rows", profile.bad_rows},
        {"arrivals",
         {{"start_s", profile.arrivals.start_s},
          {"end_s", profile.arrivals.end_s},
          {"rate_rps", round_significant(profile.arrivals.rate_rps)},
          {"interarrival_cv", round_significant(profile.arrivals.interarrival_cv)},
          {"peak_requests_1s", profile.arrivals.peak_requests_1s}}},
        {"input_tokens", profile.input_tokens},
        {"output_tokens", profile.output_tokens},
        {"prefix",
         {{"known", profile.prefix.known},
          {"requests", profile.prefix.requests},
          {"blocks", profile.prefix.blocks},
          {"hit_blocks", profile.prefix.hit_blocks},
          {"capacity_blocks", profile.prefix.capacity_blocks},
          {"reuse", round_significant(profile.prefix.reuse)}}},
        {"batching", batching_to_json(profile.batching)},
        {"expert_load",
         {{"layers", layers},
          {"mean_imbalance", round_significant(profile.expert_load.mean_imbalance)},
          {"max_imbalance", round_significant(profile.expert_load.max_imbalance)}}},
        {"sample_requests", profile.sample_requests}};
    return json.dump(indent);
}

Result<Profile> profile_from_json(std::string_view text) {
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) return error("profile is not a JSON object");
    if (json.value("schema", "") != kProfileSchema)
        return error("not a profile: schema is not {}", kProfileSchema);
    try {
        Profile profile;
        profile.source = json.value("source", "");
        profile.format = json.value("format", "");
        json.at("requests").get_to(profile.requests);
        profile.bad_rows = json.value("bad_rows", uint64_t(0));
        const nlohmann::json &arrivals = json.at("arrivals");
        arrivals.at("start_s").get_to(profile.arrivals.start_s);
        arrivals.at("end_s").get_to(profile.arrivals.end_s);
        arrivals.at("rate_rps").get_to(profile.arrivals.rate_rps);
        arrivals.at("interarrival_cv").get_to(profile.arrivals.interarrival_cv);
        arrivals.at("peak_requests_1s").get_to(profile.arrivals.peak_requests_1s);
        json.at("input_tokens").get_to(profile.input_tokens);
        json.at("output_tokens").get_to(profile.output_tokens);
        const nlohmann::json &prefix = json.at("prefix");
        prefix.at("known").get_to(profile.prefix.known);
        prefix.at("requests").get_to(profile.prefix.requests);
        prefix.at("blocks").get_to(profile.prefix.blocks);
        prefix.at("hit_blocks").get_to(profile.prefix.hit_blocks);
        prefix.at("capacity_blocks").get_to(profile.prefix.capacity_blocks);
        prefix.at("reuse").get_to(profile.prefix.reuse);
        if (json.contains("batching")) profile.batching = batching_from_json(json.at("batching"));
        if (json.contains("expert_load")) {
            for (const nlohmann::json &layer : json.at("expert_load").at("layers"))
                profile.expert_load.layers.push_back(
                    {layer.at("tokens").get<std::vector<uint64_t>>(), 0});
            update_imbalance(profile.expert_load);
        }
        if (json.contains("sample_requests"))
            json.at("sample_requests").get_to(profile.sample_requests);
        return profile;
    } catch (const nlohmann::json::exception &failure) {
        return error("bad profile JSON: {}", failure.what());
    }
}

Result<Profile> load_profile(const std::filesystem::path &path) {
    Result<std::string> text = read_text_file(path);
    HP_TRY(text);
    Result<Profile> profile = profile_from_json(*text);
    if (!profile.ok()) return error("{}: {}", path.string(), profile.error());
    return profile;
}

}  // namespace hp::traffic
