// The shape of one engine step under continuous batching (decode sequences with their KV lengths,
// prefill chunks), the engine limits that bound it, and the per-step cost model used to weigh
// shapes:  step_ms = base_ms + per_token_ms * batched_tokens + per_kv_token_ms * kv_tokens_read,
// where batched_tokens = decode sequences + prefill chunk tokens and kv_tokens_read is, per
// sequence, the KV entries attended after the step (kv_len + 1 for decode, kv_start + tokens for a
// chunk). The defaults approximate an 8B dense model in bf16 on one H100-class GPU: ~5 ms to
// stream the weights, ~25k prefill tokens/s, ~128 KiB of KV per token at ~3 TB/s.
#pragma once

#include <cstdint>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::traffic {

struct PrefillChunk {
    uint32_t tokens = 0;    // prompt tokens computed in this step
    uint32_t kv_start = 0;  // tokens of the sequence already in the KV cache before the chunk
};

struct StepShape {
    // One entry per decode sequence: tokens in its KV cache before the step (= the position of
    // the token being decoded). decode batch size = decode_kv_len.size().
    std::vector<uint32_t> decode_kv_len;
    std::vector<PrefillChunk> prefill;

    uint32_t decode_batch() const { return uint32_t(decode_kv_len.size()); }
    uint64_t prefill_tokens() const;
    uint64_t batched_tokens() const { return decode_batch() + prefill_tokens(); }
    uint64_t kv_tokens_read() const;
};

struct EngineLimits {
    uint32_t max_batch = 256;            // sequences in flight (decode + prefill)
    uint32_t max_batched_tokens = 8192;  // tokens computed in one step
};

struct StepCostModel {
    double base_ms = 5.0;
    double per_token_ms = 0.04;
    double per_kv_token_ms = 0.00004;

    double step_ms(uint64_t batched_tokens, uint64_t kv_tokens_read) const {
        return base_ms + per_token_ms * double(batched_tokens) +
               per_kv_token_ms * double(kv_tokens_read);
    }
    double step_ms(const StepShape &shape) const {
        return step_ms(shape.batched_tokens(), shape.kv_tokens_read());
    }
};

// What a simulation can run on: at least one sequence and one token per step, and steps that take
// a finite, positive time — base_ms > 0 (a step launches kernels and streams the weights even for
// one token), per-token terms >= 0 — each coefficient at most kMaxStepCostMs (one hour), so the
// simulated clock stays finite. Errors name the field, the range and the value.
inline constexpr double kMaxStepCostMs = 3.6e6;
Status check_engine_limits(const EngineLimits &limits);
Status check_cost_model(const StepCostModel &cost);

}  // namespace hp::traffic
