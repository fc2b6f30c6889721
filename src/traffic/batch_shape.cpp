// Token and KV accounting of one step shape.
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

}  // namespace hp::traffic
