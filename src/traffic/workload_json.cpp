// Workload <-> JSON: shapes as {"weight", "step_share", "profile_step_ms", "decode", "prefill"}.
#include "hotpass/traffic/workload_json.h"

#include "hotpass/core/mapped_file.h"
#include "hotpass/traffic/json_codec.h"

namespace hp::traffic {

std::string workload_to_json(const Workload &workload, int indent) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const WorkloadShape &shape : workload.shapes) {
        nlohmann::json entry = shape.shape;  // "decode", "prefill"
        entry["weight"] = round_significant(shape.weight);
        entry["step_share"] = round_significant(shape.step_share);
        entry["profile_step_ms"] = round_significant(shape.profile_step_ms);
        shapes.push_back(std::move(entry));
    }
    nlohmann::json json = {
        {"schema", kWorkloadSchema},
        {"source", workload.source},
        {"tier", tier_name(workload.tier)},
        {"limits", workload.limits},
        {"cost_model", workload.cost},
        {"coverage", round_significant(workload.coverage)},
        {"predicted_tokens_per_s", round_significant(workload.predicted_tokens_per_s)},
        {"shapes", shapes},
        {"requests", workload.requests}};
    return json.dump(indent);
}

Result<Workload> workload_from_json(std::string_view text) {
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) return error("workload is not a JSON object");
    if (json.value("schema", "") != kWorkloadSchema)
        return error("not a workload: schema is not {}", kWorkloadSchema);
    try {
        Workload workload;
        workload.source = json.value("source", "");
        const std::string tier = json.at("tier").get<std::string>();
        if (tier != "fast" && tier != "slow")
            return error("tier must be fast or slow, got {}", tier);
        workload.tier = tier == "fast" ? Tier::fast : Tier::slow;
        json.at("limits").get_to(workload.limits);
        json.at("cost_model").get_to(workload.cost);
        json.at("coverage").get_to(workload.coverage);
        workload.predicted_tokens_per_s = json.value("predicted_tokens_per_s", 0.0);
        for (const nlohmann::json &entry : json.at("shapes")) {
            WorkloadShape shape;
            entry.get_to(shape.shape);
            entry.at("weight").get_to(shape.weight);
            shape.step_share = entry.value("step_share", 0.0);
            shape.profile_step_ms = entry.value("profile_step_ms", 0.0);
            if (shape.weight < 0 || shape.weight > 1)
                return error("shape weight {} outside [0, 1]", shape.weight);
            workload.shapes.push_back(std::move(shape));
        }
        if (json.contains("requests")) json.at("requests").get_to(workload.requests);
        return workload;
    } catch (const nlohmann::json::exception &failure) {
        return error("bad workload JSON: {}", failure.what());
    }
}

Result<Workload> load_workload(const std::filesystem::path &path) {
    Result<std::string> text = read_text_file(path);
    HP_TRY(text);
    Result<Workload> workload = workload_from_json(*text);
    if (!workload.ok()) return error("{}: {}", path.string(), workload.error());
    return workload;
}

}  // namespace hp::traffic
