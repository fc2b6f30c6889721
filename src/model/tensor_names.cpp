// Checkpoint tensor names per architecture, from each transformers modelling file's module names.
#include "hotpass/model/tensor_names.h"

#include <fmt/format.h>

namespace hp::model {

bool TensorSpec::is_norm() const {
    return slot == Slot::output_norm || slot == Slot::attn_norm || slot == Slot::ffn_norm ||
           slot == Slot::q_norm || slot == Slot::k_norm;
}

bool TensorSpec::is_bias() const {
    return slot == Slot::bq || slot == Slot::bk || slot == Slot::bv || slot == Slot::bo ||
           slot == Slot::b_gate || slot == Slot::b_up || slot == Slot::b_down;
}

std::string shape_string(const std::vector<int64_t> &shape) {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::vector<TensorSpec> expected_tensors(const ModelConfig &config) {
    const int64_t d_model = config.d_model;
    const int64_t q_width = int64_t(config.n_head) * config.d_head;
    const int64_t kv_width = int64_t(config.n_head_kv) * config.d_head;
    std::vector<TensorSpec> specs;
    auto add = [&](std::string name, std::vector<int64_t> shape, Slot slot, int layer = -1, int expert = -1) {
        specs.push_back(TensorSpec{std::move(name), std::move(shape), slot, layer, expert});
    };

    add("model.embed_tokens.weight", {config.n_vocab, d_model}, Slot::token_embd);
    for (int layer = 0; layer < config.n_layer; ++layer) {
        const std::string prefix = fmt::format("model.layers.{}.", layer);
        const std::string attn = prefix + "self_attn.";
        add(prefix + "input_layernorm.weight", {d_model}, Slot::attn_norm, layer);
        add(attn + "q_proj.weight", {q_width, d_model}, Slot::wq, layer);
        add(attn + "k_proj.weight", {kv_width, d_model}, Slot::wk, layer);
        add(attn + "v_proj.weight", {kv_width, d_model}, Slot::wv, layer);
        add(attn + "o_proj.weight", {d_model, q_width}, Slot::wo, layer);
        if (config.qkv_bias) {
            add(attn + "q_proj.bias", {q_width}, Slot::bq, layer);
            add(attn + "k_proj.bias", {kv_width}, Slot::bk, layer);
            add(attn + "v_proj.bias", {kv_width}, Slot::bv, layer);
        }
        if (config.o_bias) add(attn + "o_proj.bias", {d_model}, Slot::bo, layer);
        if (config.qk_norm) {
            add(attn + "q_norm.weight", {config.d_head}, Slot::q_norm, layer);
            add(attn + "k_norm.weight", {config.d_head}, Slot::k_norm, layer);
        }
        add(prefix + "post_attention_layernorm.weight", {d_model}, Slot::ffn_norm, layer);

        if (!config.layer_is_moe[size_t(layer)]) {
            const std::string mlp = prefix + "mlp.";
            add(mlp + "gate_proj.weight", {config.d_ff, d_model}, Slot::w_gate, layer);
            add(mlp + "up_proj.weight", {config.d_ff, d_model}, Slot::w_up, layer);
            add(mlp + "down_proj.weight", {d_model, config.d_ff}, Slot::w_down, layer);
            if (config.mlp_bias) {
                add(mlp + "gate_proj.bias", {config.d_ff}, Slot::b_gate, layer);
                add(mlp + "up_proj.bias", {config.d_ff}, Slot::b_up, layer);
                add(mlp + "down_proj.bias", {d_model}, Slot::b_down, layer);
            }
            continue;
        }
        const int64_t d_ff = config.d_ff_expert;
        if (config.arch == Architecture::mixtral) {
            const std::string moe = prefix + "block_sparse_moe.";
            add(moe + "gate.weight", {config.n_expert, d_model}, Slot::router, layer);
            for (int e = 0; e < config.n_expert; ++e) {
                const std::string expert = fmt::format("{}experts.{}.", moe, e);
                add(expert + "w1.weight", {d_ff, d_model}, Slot::expert_gate, layer, e);
                add(expert + "w2.weight", {d_model, d_ff}, Slot::expert_down, layer, e);
                add(expert + "w3.weight", {d_ff, d_model}, Slot::expert_up, layer, e);
            }
            continue;
        }
        const std::string mlp = prefix + "mlp.";
        add(mlp + "gate.weight", {config.n_expert, d_model}, Slot::router, layer);
        for (int e = 0; e < config.n_expert; ++e) {
            const std::string expert = fmt::format("{}experts.{}.", mlp, e);
            add(expert + "gate_proj.weight", {d_ff, d_model}, Slot::expert_gate, layer, e);
            add(expert + "up_proj.weight", {d_ff, d_model}, Slot::expert_up, layer, e);
            add(expert + "down_proj.weight", {d_model, d_ff}, Slot::expert_down, layer, e);
        }
        if (config.d_ff_shared_expert > 0) {
            const int64_t d_shared = config.d_ff_shared_expert;
            add(mlp + "shared_expert.gate_proj.weight", {d_shared, d_model}, Slot::shared_gate, layer);
            add(mlp + "shared_expert.up_proj.weight", {d_shared, d_model}, Slot::shared_up, layer);
            add(mlp + "shared_expert.down_proj.weight", {d_model, d_shared}, Slot::shared_down, layer);
            add(mlp + "shared_expert_gate.weight", {1, d_model}, Slot::shared_expert_gate, layer);
        }
    }
    add("model.norm.weight", {d_model}, Slot::output_norm);
    if (!config.tied_embeddings) add("lm_head.weight", {config.n_vocab, d_model}, Slot::lm_head);
    return specs;
}

}  // namespace hp::model
