// Token and KV accounting of one step shape; the ranges of engine limits and cost models.
#include "hotpass/traffic/batch_shape.h"

namespace hp::traffic {

uint64_t StepShape::prefill_tokens() const {
    uint64_t tokens = 0;
    for (const PrefillChunk &chunk : prefill) tokens += chunk.tokens;
    return tokens;
}

uint64_t StepShape::kv_tokens_read() const {
    uint64_t tokens = 0;
    for (uint32_t kv_len : decode_kv_len) tokens += uint64_t(kv_len) + 1;
    for (const PrefillChunk &chunk : prefill) tokens += uint64_t(chunk.kv_start) + chunk.tokens;
    return tokens;
}

Status check_engine_limits(const EngineLimits &limits) {
    if (limits.max_batch == 0) return error("engine limit max_batch must be >= 1 sequence, got 0");
    if (limits.max_batched_tokens == 0)
        return error("engine limit max_batched_tokens must be >= 1 token, got 0");
    return Status::success();
}

Status check_cost_model(const StepCostModel &cost) {
    if (!(cost.base_ms > 0 && cost.base_ms <= kMaxStepCostMs))
        return error(
            "cost model base_ms must be a finite number > 0 and <= {} ms (every engine step "
            "takes some time), got {}",
            kMaxStepCostMs, cost.base_ms);
    const struct {
        const char *name;
        double ms;
    } per_token[] = {{"per_token_ms", cost.per_token_ms},
                     {"per_kv_token_ms", cost.per_kv_token_ms}};
    for (const auto &[name, ms] : per_token)
        if (!(ms >= 0 && ms <= kMaxStepCostMs))
            return error("cost model {} must be a finite number >= 0 and <= {} ms, got {}", name,
                         kMaxStepCostMs, ms);
    return Status::success();
}

}  // namespace hp::traffic
