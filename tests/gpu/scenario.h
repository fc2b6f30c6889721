// A fixed, mixed sequence of engine steps (prefill chunks, decode tokens, several sequences, one
// long enough to span many KV blocks and attention splits, steps of 4 to 150 tokens) with random tokens, for differential
// tests that run two engines on identical inputs and compare every step's logits.
#pragma once

#include <cstdint>
#include <vector>

#include "hotpass/core/hash.h"
#include "hotpass/engine/engine.h"

namespace hp::gpu_test {

struct ScenarioResult {
    std::vector<std::vector<float>> logits;  // per step
    std::vector<int32_t> expert_counts;
    std::string error;
};

inline ScenarioResult run_scenario(engine::Engine &engine, uint64_t seed) {
    ScenarioResult result;
    const int n_vocab = engine.config().n_vocab;
    uint64_t counter = 0;
    auto tokens = [&](int n) {
        std::vector<int32_t> out;
        for (int i = 0; i < n; ++i) out.push_back(int32_t(splitmix64(seed * 7919 + counter++) % uint64_t(n_vocab)));
        return out;
    };
    const int a = engine.add_sequence(), b = engine.add_sequence(), c = engine.add_sequence(), d = engine.add_sequence();
    // e and f only in two larger steps: a near-tied MoE routing that flips there (test_cuda_baseline
    // allows a few flipped rows) cannot spread through their KV into the other sequences' rows.
    const int e = engine.add_sequence(), f = engine.add_sequence();
    // Each step: (sequence, token count, all_logits).
    struct Part {
        int seq, n;
        bool all;
    };
    const std::vector<std::vector<Part>> plan = {
        {{a, 7, true}, {b, 3, false}},
        {{a, 1, false}, {b, 5, true}, {c, 9, false}},
        {{d, 150, false}},
        {{e, 20, false}, {f, 4, false}},  // 24 and 64 tokens, on sequences no later step reads
        {{e, 40, false}, {f, 24, false}},
        {{a, 1, false}, {b, 1, false}, {c, 1, false}, {d, 1, false}},
        {{d, 1, false}, {c, 2, true}, {a, 1, false}},
        {{a, 1, false}, {b, 1, false}, {c, 1, false}, {d, 1, false}},
    };
    for (const auto &step : plan) {
        std::vector<std::vector<int32_t>> chunks;
        for (const Part &part : step) chunks.push_back(tokens(part.n));
        std::vector<engine::StepInput> inputs;
        for (size_t i = 0; i < step.size(); ++i) inputs.push_back({step[i].seq, chunks[i], step[i].all});
        auto logits = engine.step(inputs);
        if (!logits.ok()) {
            result.error = logits.error();
            return result;
        }
        result.logits.push_back(std::move(logits).value());
    }
    result.expert_counts = engine.expert_counts();
    for (int seq : {a, b, c, d, e, f}) engine.remove_sequence(seq);
    return result;
}

}  // namespace hp::gpu_test
