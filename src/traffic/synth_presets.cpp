// The synthetic-traffic presets, fitted from the shared traces (../shared/data/traces). Length
// knots are the traces' nearest-rank quantiles at p = 0, .05, .1, .25, .5, .75, .9, .95, .99, 1;
// rate = (n-1)/span; CV = population std/mean of inter-arrival gaps; follow_up_share was
// calibrated so the generated prefix reuse matches the trace's (docs/traffic.md has the commands
// and the achieved figures).
#include "hotpass/traffic/synth.h"

namespace hp::traffic {
namespace {

std::vector<QuantileKnot> knots(std::initializer_list<uint32_t> tokens) {
    static constexpr double kP[] = {0, .05, .1, .25, .5, .75, .9, .95, .99, 1};
    std::vector<QuantileKnot> result;
    size_t i = 0;
    for (uint32_t value : tokens) result.push_back({kP[i++], value});
    return result;
}

std::vector<SynthPreset> make_presets() {
    SynthPreset chat;
    chat.name = "chat";
    chat.fitted_from = "azure_llm_2023_conv.csv (19,366 requests, 1 h)";
    chat.input_tokens = knots({2, 181, 207, 396, 1020, 1189, 2735, 4083, 4142, 14050});
    chat.output_tokens = knots({7, 41, 54, 85, 129, 395, 424, 451, 601, 1000});
    chat.rate_rps = 5.530;
    chat.interarrival_cv = 1.094;

    SynthPreset code;
    code.name = "code";
    code.fitted_from = "azure_llm_2023_code.csv (8,819 requests, 1 h)";
    code.input_tokens = knots({3, 75, 147, 578, 1469, 2745, 5194, 7315, 7436, 7437});
    code.output_tokens = knots({6, 6, 7, 9, 13, 24, 55, 90, 252, 1899});
    code.rate_rps = 2.566;
    code.interarrival_cv = 13.15;

    SynthPreset long_context;
    long_context.name = "long-context";
    long_context.fitted_from = "mooncake_synthetic.jsonl (3,993 requests, 17 min)";
    long_context.input_tokens = knots({13, 22, 30, 277, 11587, 23175, 38615, 49009, 66458, 191378});
    long_context.output_tokens = knots({1, 2, 4, 11, 69, 250, 389, 519, 769, 893});
    long_context.rate_rps = 3.906;
    long_context.interarrival_cv = 1.011;
    long_context.follow_up_share = 0.74;
    long_context.prefix_hashes = true;

    SynthPreset agentic;
    agentic.name = "agentic";
    agentic.fitted_from = "mooncake_conversation.jsonl (12,031 requests, 59 min)";
    agentic.input_tokens = knots({891, 901, 964, 2306, 6909, 15368, 27367, 39552, 85401, 126195});
    agentic.output_tokens = knots({1, 10, 24, 156, 350, 472, 597, 698, 1120, 2000});
    agentic.rate_rps = 3.401;
    agentic.interarrival_cv = 3.034;
    agentic.follow_up_share = 0.39;
    agentic.system_prompt_blocks = 1;
    agentic.prefix_hashes = true;
    return {chat, code, long_context, agentic};
}

}  // namespace

const std::vector<SynthPreset> &synth_presets() {
    static const std::vector<SynthPreset> presets = make_presets();
    return presets;
}

Result<SynthPreset> find_synth_preset(std::string_view name) {
    std::string names;
    for (const SynthPreset &preset : synth_presets()) {
        if (preset.name == name) return preset;
        names += (names.empty() ? "" : "|") + preset.name;
    }
    return error("unknown preset `{}` (one of {})", name, names);
}

}  // namespace hp::traffic
