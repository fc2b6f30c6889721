// Causal GQA attention over the paged KV cache (layout fixed by the ABI: per layer
// dtype [n_block][block_tokens][n_head_kv][d_head]). One call handles one token and one KV head
// with all the query heads that share it, so each K/V row is read and widened once per group.
// Online softmax over blocks of HP_ATTN_BLOCK positions keeps the scratch fixed-size.
#pragma once

#include <hotpass/forward_abi.h>

#include <cstdint>

namespace hp_cpu {

int64_t attention_scratch_floats(const hp_config &config);

// out[h] for the query heads h of `kv_head`'s group: softmax(q_h K^T / sqrt(d_head)) V over
// positions [0, position] of the sequence whose block table is `block_table`.
// q and out are the token's [n_head][d_head] rows.
void attention_group(const hp_model &model, int layer, const int32_t *block_table, int position, int kv_head,
                     const float *q, float *out, float *scratch);

}  // namespace hp_cpu
