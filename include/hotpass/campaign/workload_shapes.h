// The campaign's traffic: a `--traffic` spec (a synthetic preset name such as "chat", a
// hotpass.workload/1 file, a profile JSON or a trace) becomes a Profile, the fast-tier (<= 4
// shapes) and slow-tier Workloads, and the tune::Shapes the executor times.
// A traffic shape is scaled to what the executor can hold: decode_kv is the mean of the
// sequences' KV lengths, and batch x KV plus prefill tokens stay within `max_kv_tokens` (the
// executor's KV cache is 8192 tokens and verification needs room beside the timing batch), KV
// first, then batch; a prefill chunk's kv_start is not represented (tune::Shape has none).
// A shape's weight is its share of steps (step_share): tune's weighted speedup is the ratio of
// sum_i weight_i * t_i, the mean step time, which the share of step time would count twice.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/workload.h"
#include "hotpass/tune/runner.h"

namespace hp::campaign {

struct ShapeLimits {
    int max_kv_tokens = 3072;  // decode_batch * (decode_kv + 1) + prefill tokens
    int max_decode_batch = 32;
    int max_prefill_tokens = 512;
    int min_decode_kv = 16;
};

std::vector<tune::Shape> shapes_from_workload(const traffic::Workload &workload, const ShapeLimits &limits = {});

struct CampaignTraffic {
    std::string spec;
    nlohmann::json profile;       // the Profile as JSON (profile_to_json)
    traffic::Workload fast, slow;
    std::vector<tune::Shape> fast_shapes, slow_shapes;
};

// "chat", "code", "long-context", "agentic" (synthetic, 10 minutes), or a path to a
// hotpass.workload/1 file (used for both tiers, the fast tier keeping its 4 heaviest shapes), a
// profile JSON, or a trace file (azure, mooncake, burstgpt, hotpass request log).
Result<CampaignTraffic> load_campaign_traffic(const std::string &spec);

// The shapes `hotpass submit --workload PATH` times: a {"shapes": [...]} file (tune::parse_shapes,
// the form a campaign records), or a file load_campaign_traffic takes (a hotpass.workload/1 file,
// a profile, a trace), whose fast- or slow-tier shapes.
Result<std::vector<tune::Shape>> load_executor_shapes(const std::string &path, bool fast_tier);

}  // namespace hp::campaign
