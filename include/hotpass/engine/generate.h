// Greedy generation over an Engine: prefill every prompt (in chunks), then decode all sequences
// together one token per step. Timings separate prefill from decode.
#pragma once

#include <cstdint>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/engine/engine.h"

namespace hp::engine {

struct GenerateOptions {
    int n_new = 16;             // tokens to generate per prompt
    int prefill_chunk = 0;      // max prompt tokens per sequence per step; 0: whole prompt
    bool prompt_logits = false; // keep the logits of every prompt position
    bool stop_at_eos = true;
};

struct GenerateResult {
    std::vector<std::vector<int32_t>> generated;           // [prompt][token]
    std::vector<std::vector<float>> prompt_logits;         // [prompt][position * n_vocab + v]
    double prefill_seconds = 0;
    double decode_seconds = 0;
    int64_t n_prefill_token = 0;
    int64_t n_decode_token = 0;  // tokens produced by decode steps (the first token comes from prefill)
    int n_decode_step = 0;
};

int32_t argmax(const float *logits, int n_vocab);  // first index of the maximum, as torch.argmax

Result<GenerateResult> generate_greedy(Engine &engine, const std::vector<std::vector<int32_t>> &prompts,
                                       const GenerateOptions &options);

}  // namespace hp::engine
