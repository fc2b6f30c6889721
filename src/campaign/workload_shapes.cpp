#include "hotpass/campaign/workload_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "hotpass/core/mapped_file.h"
#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/profile_json.h"
#include "hotpass/traffic/synth.h"
#include "hotpass/traffic/workload_json.h"

namespace hp::campaign {

std::vector<tune::Shape> shapes_from_workload(const traffic::Workload &workload, const ShapeLimits &limits) {
    std::vector<tune::Shape> shapes;
    for (const traffic::WorkloadShape &item : workload.shapes) {
        const traffic::StepShape &step = item.shape;
        tune::Shape shape;
        // tune weighs per-shape times by `weight` (sum_i weight_i * t_i is the mean step time), so
        // its weight is the share of steps; the workload's `weight` is the share of step time.
        shape.weight = item.step_share > 0 ? item.step_share : item.weight;
        shape.decode_batch = std::min<int>(int(step.decode_batch()), limits.max_decode_batch);
        if (shape.decode_batch > 0) {
            const double mean_kv = std::accumulate(step.decode_kv_len.begin(), step.decode_kv_len.end(), 0.0) / double(step.decode_batch());
            shape.decode_kv = std::max(limits.min_decode_kv, int(mean_kv));
        }
        int prefill_total = 0;
        for (const traffic::PrefillChunk &chunk : step.prefill) {
            const int tokens = std::min<int>(int(chunk.tokens), limits.max_prefill_tokens - prefill_total);
            if (tokens <= 0) break;
            shape.prefill.push_back(tokens);
            prefill_total += tokens;
        }
        // Fit the KV cache: shorten the decode KV first (down to min_decode_kv), then the batch.
        const int room = std::max(0, limits.max_kv_tokens - prefill_total);
        if (shape.decode_batch > 0 && shape.decode_batch * (shape.decode_kv + 1) > room) {
            shape.decode_kv = std::max(limits.min_decode_kv, room / shape.decode_batch - 1);
            while (shape.decode_batch > 1 && shape.decode_batch * (shape.decode_kv + 1) > room) --shape.decode_batch;
        }
        if (shape.decode_batch == 0 && shape.prefill.empty()) continue;
        shape.name = shape.prefill.empty()       ? fmt::format("decode b{} kv{}", shape.decode_batch, shape.decode_kv)
                     : shape.decode_batch == 0   ? fmt::format("prefill [{}]", fmt::join(shape.prefill, ","))
                                                 : fmt::format("decode b{} kv{} + prefill [{}]", shape.decode_batch, shape.decode_kv,
                                                               fmt::join(shape.prefill, ","));
        // Two traffic shapes that scale to the same executor shape are one shape.
        auto same = std::find_if(shapes.begin(), shapes.end(), [&](const tune::Shape &s) { return s.name == shape.name; });
        if (same != shapes.end()) same->weight += shape.weight;
        else shapes.push_back(std::move(shape));
    }
    const double total = std::accumulate(shapes.begin(), shapes.end(), 0.0, [](double sum, const tune::Shape &s) { return sum + s.weight; });
    for (tune::Shape &shape : shapes) shape.weight = total > 0 ? shape.weight / total : 1.0 / double(shapes.size());
    return shapes;
}

namespace {

bool is_workload_file(const std::string &text) { return text.find("hotpass.workload/1") != std::string::npos; }

// CPU-sized engine limits: the fitted traces' arrival rates at an H100 cost model would batch
// hundreds of sequences, far past what a CPU executor serves.
traffic::ProfileOptions cpu_profile_options() {
    traffic::ProfileOptions options;
    options.limits.max_batch = 32;
    options.limits.max_batched_tokens = 512;
    return options;
}

Status derive_tiers(const traffic::Profile &profile, CampaignTraffic &out) {
    traffic::WorkloadOptions fast;
    fast.tier = traffic::Tier::fast;
    fast.max_shapes = traffic::kMaxShapesFast;
    auto fast_workload = traffic::derive_workload(profile, fast);
    if (!fast_workload.ok()) return Error{fast_workload.error()};
    traffic::WorkloadOptions slow;
    slow.max_shapes = 8;  // a CPU slow tier times each shape for about a second: 8 keep it short
    auto slow_workload = traffic::derive_workload(profile, slow);
    if (!slow_workload.ok()) return Error{slow_workload.error()};
    out.fast = std::move(fast_workload).value();
    out.slow = std::move(slow_workload).value();
    out.profile = nlohmann::json::parse(traffic::profile_to_json(profile), nullptr, false);
    return {};
}

}  // namespace

Result<CampaignTraffic> load_campaign_traffic(const std::string &spec) {
    CampaignTraffic out;
    out.spec = spec;
    if (!std::filesystem::exists(spec)) {
        auto preset = traffic::find_synth_preset(spec);
        if (!preset.ok()) return error("--traffic {}: neither a file nor a synthetic preset ({})", spec, preset.error());
        traffic::SynthOptions synth;
        synth.preset = spec;
        synth.duration_s = 600;
        auto requests = traffic::synthesize_requests(synth);
        if (!requests.ok()) return Error{requests.error()};
        const traffic::Profile profile = traffic::profile_requests(*requests, cpu_profile_options(), "synth:" + spec);
        HP_TRY(derive_tiers(profile, out));
    } else {
        auto text = read_text_file(spec);
        if (text.ok() && is_workload_file(text->substr(0, 4096))) {
            auto workload = traffic::workload_from_json(*text);
            if (!workload.ok()) return error("{}: {}", spec, workload.error());
            out.slow = *workload;
            out.fast = *workload;
            if (out.fast.shapes.size() > traffic::kMaxShapesFast) out.fast.shapes.resize(traffic::kMaxShapesFast);
            out.profile = {{"source", spec}, {"workload_only", true}};
        } else if (text.ok() && text->find("\"schema\"") != std::string::npos && text->find("hotpass.profile") != std::string::npos) {
            auto profile = traffic::profile_from_json(*text);
            if (!profile.ok()) return error("{}: {}", spec, profile.error());
            HP_TRY(derive_tiers(*profile, out));
        } else {
            auto traced = traffic::profile_trace(spec, std::nullopt, {}, cpu_profile_options());
            if (!traced.ok()) return traced.error().starts_with(spec) ? Error{traced.error()} : error("{}: {}", spec, traced.error());
            HP_TRY(derive_tiers(traced->profile, out));
        }
    }
    out.fast_shapes = shapes_from_workload(out.fast);
    out.slow_shapes = shapes_from_workload(out.slow);
    if (out.fast_shapes.empty() || out.slow_shapes.empty()) return error("--traffic {}: the workload has no shapes", spec);
    return out;
}

Result<std::vector<tune::Shape>> load_executor_shapes(const std::string &path, bool fast_tier) {
    auto text = read_text_file(path);
    if (!text.ok()) return Error{text.error()};
    const auto json = nlohmann::json::parse(*text, nullptr, false);
    const bool json_object = !json.is_discarded() && json.is_object();
    if (json_object && json.contains("shapes") && !json.contains("schema")) return tune::parse_shapes(json);
    // A workload or a profile (they carry a "schema"), or a trace (a one-request JSONL log is one object).
    auto traffic = load_campaign_traffic(path);
    if (traffic.ok()) return fast_tier ? traffic->fast_shapes : traffic->slow_shapes;
    if (json_object || json.is_discarded()) return Error{traffic.error()};
    return error("expected {{\"shapes\": [...]}}, a workload, a profile or a trace ({})", traffic.error());
}

}  // namespace hp::campaign
