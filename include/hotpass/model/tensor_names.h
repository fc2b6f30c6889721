// The weights each architecture has, with their checkpoint names and shapes as the config
// implies them: the single table the loader validates against, the synthetic writer fills, and
// the engine binds to the plugin ABI's slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpass/model/config.h"

namespace hp::model {

enum class Slot {
    token_embd, output_norm, lm_head,
    attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm,
    ffn_norm, w_gate, w_up, w_down, b_gate, b_up, b_down,
    router, expert_gate, expert_up, expert_down,
    shared_gate, shared_up, shared_down, shared_expert_gate,
};

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
    Slot slot;
    int layer = -1;   // decoder layer, -1 for embeddings / final norm / lm_head
    int expert = -1;  // expert index for expert_* slots

    bool is_norm() const;
    bool is_bias() const;
};

// Every tensor a checkpoint of `config` holds, in Hugging Face's order (embeddings, layers,
// final norm, lm_head). lm_head is absent when the embeddings are tied.
std::vector<TensorSpec> expected_tensors(const ModelConfig &config);

std::string shape_string(const std::vector<int64_t> &shape);  // "[1024, 256]"

}  // namespace hp::model
