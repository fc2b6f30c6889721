// Synthetic traffic modelled on the published traces, so a campaign has realistic traffic without
// a data file. A preset (synth_presets.cpp; fitted figures in docs/traffic.md) gives input and
// output length distributions as quantile knots (sampled by log-linear interpolation of the
// inverse CDF), the arrival rate and burstiness (gamma-distributed gaps with the fitted CV), and
// a prefix-sharing model: a share of requests are follow-ups that extend the longest recent prompt
// that fits (so their leading blocks repeat), and every prompt may start with shared system-prompt
// blocks. A drift halfway (or at drift_at_s) scales prompts or switches to another preset.
// Invariant: the output depends only on the options (seeded std::mt19937_64).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/profile.h"
#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/request.h"

namespace hp::traffic {

struct QuantileKnot {
    double p = 0;         // cumulative probability in [0, 1]
    uint32_t tokens = 0;  // the length at that quantile
};

struct SynthPreset {
    std::string name;
    std::string fitted_from;                 // the trace the figures come from
    std::vector<QuantileKnot> input_tokens;  // p from 0 to 1, increasing
    std::vector<QuantileKnot> output_tokens;
    double rate_rps = 1;                // mean arrival rate of the trace
    double interarrival_cv = 1;         // fitted; the generator clamps it to [0.25, 4]
    double follow_up_share = 0;         // share of requests extending a recent prompt
    uint32_t system_prompt_blocks = 0;  // shared leading blocks of every prompt
    bool prefix_hashes = false;         // whether requests carry prefix hashes
};

const std::vector<SynthPreset> &synth_presets();  // chat, code, long-context, agentic
Result<SynthPreset> find_synth_preset(std::string_view name);

struct SynthDrift {
    double input_scale = 1;  // prompts are this many times longer after the drift point
    std::string preset;      // or: switch to this preset (its own rate unless rate_rps is set)
};
// "2" or "1.5" (input scale) or a preset name.
Result<SynthDrift> parse_synth_drift(std::string_view spec);

struct SynthOptions {
    std::string preset = "chat";
    double rate_rps = 0;  // 0: the preset's fitted rate
    double duration_s = 600;
    uint64_t seed = 1;
    std::optional<SynthDrift> drift;
    double drift_at_s = -1;  // < 0: duration_s / 2
};

// A log of more requests than this is refused: at a few hundred bytes a line it is gigabytes.
inline constexpr uint64_t kMaxSynthRequests = 20'000'000;

// An error for options synthesize() would refuse: an unknown preset, a duration that is not finite
// and > 0, a rate that is not finite and >= 0 (0: the preset's), a NaN drift_at_s, or a log of
// more than kMaxSynthRequests expected requests (rate x duration). Check before creating output.
Status check_synth_options(const SynthOptions &options);

// Generates requests in arrival order and hands each to `emit` (after check_synth_options).
Status synthesize(const SynthOptions &options, const std::function<void(const Request &)> &emit);
Result<std::vector<Request>> synthesize_requests(const SynthOptions &options);

// The campaign's default traffic when no trace is given: `synth --preset chat` for 10 minutes.
std::vector<Request> default_chat_requests(double duration_s = 600, uint64_t seed = 1);
Profile default_chat_profile(const ProfileOptions &options = {});

}  // namespace hp::traffic
