// Built-in model presets. The large ones copy the published configs' shapes (Llama 3.2 1B,
// Qwen3-30B-A3B); the tiny ones exist so every architecture runs in seconds on a laptop.
#include <fmt/format.h>

#include "hotpass/model/synthetic.h"

namespace hp::model {
namespace {

ModelConfig dense(Architecture arch, int n_vocab, int d_model, int n_layer, int n_head, int n_head_kv, int d_head, int d_ff) {
    ModelConfig config;
    config.arch = arch;
    config.n_vocab = n_vocab;
    config.d_model = d_model;
    config.n_layer = n_layer;
    config.n_head = n_head;
    config.n_head_kv = n_head_kv;
    config.d_head = d_head;
    config.d_ff = d_ff;
    config.norm_eps = 1e-5f;
    config.max_position = 4096;
    config.initializer_range = 0.02f;
    config.bos_token_id = 1;
    config.eos_token_ids = {2};
    config.layer_is_moe.assign(size_t(n_layer), false);
    return config;
}

void make_moe(ModelConfig &config, int n_expert, int n_expert_used, int d_ff_expert, bool norm_topk_prob) {
    config.n_expert = n_expert;
    config.n_expert_used = n_expert_used;
    config.d_ff_expert = d_ff_expert;
    config.norm_topk_prob = norm_topk_prob;
    config.layer_is_moe.assign(size_t(config.n_layer), true);
}

Result<ModelConfig> build(std::string_view name) {
    if (name == "tiny-llama") {
        ModelConfig config = dense(Architecture::llama, 1024, 256, 4, 8, 2, 32, 688);
        config.tied_embeddings = true;
        config.initializer_range = 0.1f;  // separated logits, as in the HF test checkpoints
        return config;
    }
    if (name == "tiny-llama3") {  // llama3 RoPE scaling, attention and MLP biases, tied
        ModelConfig config = dense(Architecture::llama, 512, 128, 2, 4, 2, 32, 256);
        config.tied_embeddings = true;
        config.qkv_bias = config.o_bias = config.mlp_bias = true;
        config.rope_theta = 500000.0f;
        config.rope_type = RopeType::llama3;
        config.rope_factor = 8.0f;
        config.rope_low_freq_factor = 1.0f;
        config.rope_high_freq_factor = 4.0f;
        config.rope_original_max_position = 64;  // small, so the scaling bands all apply
        config.initializer_range = 0.1f;
        return config;
    }
    if (name == "tiny-qwen2") {
        ModelConfig config = dense(Architecture::qwen2, 512, 128, 2, 4, 2, 32, 256);
        config.qkv_bias = true;
        config.rope_theta = 1000000.0f;
        config.initializer_range = 0.1f;
        return config;
    }
    if (name == "tiny-qwen3") {
        ModelConfig config = dense(Architecture::qwen3, 512, 128, 2, 4, 2, 48, 256);
        config.qk_norm = true;
        config.rope_theta = 1000000.0f;
        config.norm_eps = 1e-6f;
        config.initializer_range = 0.1f;
        return config;
    }
    if (name == "tiny-moe") {  // Qwen3-MoE style: 8 experts top-2, q/k norm
        ModelConfig config = dense(Architecture::qwen3_moe, 1024, 256, 4, 4, 2, 32, 512);
        config.qk_norm = true;
        config.rope_theta = 1000000.0f;
        config.norm_eps = 1e-6f;
        config.initializer_range = 0.1f;
        make_moe(config, 8, 2, 128, true);
        return config;
    }
    if (name == "tiny-qwen2-moe") {  // shared expert, no top-k renormalisation, a dense layer
        ModelConfig config = dense(Architecture::qwen2_moe, 512, 128, 3, 4, 2, 32, 192);
        config.qkv_bias = true;
        config.rope_theta = 1000000.0f;
        config.norm_eps = 1e-6f;
        config.initializer_range = 0.1f;
        make_moe(config, 6, 2, 64, false);
        config.d_ff_shared_expert = 96;
        config.layer_is_moe[1] = false;  // mlp_only_layers = [1]
        return config;
    }
    if (name == "tiny-mixtral") {
        ModelConfig config = dense(Architecture::mixtral, 512, 128, 2, 4, 2, 32, 128);
        config.rope_theta = 1000000.0f;
        config.initializer_range = 0.1f;
        make_moe(config, 4, 2, 128, true);
        return config;
    }
    if (name == "llama-300m") {
        return dense(Architecture::llama, 32000, 1024, 16, 16, 4, 64, 4096);
    }
    if (name == "llama-3.2-1b") {  // meta-llama/Llama-3.2-1B config.json
        ModelConfig config = dense(Architecture::llama, 128256, 2048, 16, 32, 8, 64, 8192);
        config.tied_embeddings = true;
        config.max_position = 131072;
        config.rope_theta = 500000.0f;
        config.rope_type = RopeType::llama3;
        config.rope_factor = 32.0f;
        config.rope_low_freq_factor = 1.0f;
        config.rope_high_freq_factor = 4.0f;
        config.rope_original_max_position = 8192;
        config.bos_token_id = 128000;
        config.eos_token_ids = {128001};
        return config;
    }
    if (name == "qwen3-30b-a3b") {  // Qwen/Qwen3-30B-A3B config.json
        ModelConfig config = dense(Architecture::qwen3_moe, 151936, 2048, 48, 32, 4, 128, 6144);
        config.qk_norm = true;
        config.norm_eps = 1e-6f;
        config.rope_theta = 1000000.0f;
        config.max_position = 40960;
        config.bos_token_id = 151643;
        config.eos_token_ids = {151645};
        make_moe(config, 128, 8, 768, true);
        return config;
    }
    std::string names;
    for (const PresetInfo &preset : preset_list()) names += fmt::format("{}{}", names.empty() ? "" : ", ", preset.name);
    return error("unknown preset '{}'; presets: {}", name, names);
}

}  // namespace

const std::vector<PresetInfo> &preset_list() {
    static const std::vector<PresetInfo> presets = {
        {"tiny-llama", "Llama, 4 layers, d_model 256, GQA 8/2, tied embeddings"},
        {"tiny-llama3", "Llama with llama3 RoPE scaling, q/k/v/o and MLP biases, tied"},
        {"tiny-qwen2", "Qwen2, q/k/v biases"},
        {"tiny-qwen3", "Qwen3, per-head q/k RMSNorm, head_dim 48 != d_model/n_head"},
        {"tiny-moe", "Qwen3-MoE, 8 experts top-2, 4 layers"},
        {"tiny-qwen2-moe", "Qwen2-MoE, shared expert with sigmoid gate, no top-k renorm, one dense layer"},
        {"tiny-mixtral", "Mixtral, 4 experts top-2"},
        {"llama-300m", "Llama, d_model 1024, d_ff 4096, 16 layers, 16/4 heads, vocab 32000, untied"},
        {"llama-3.2-1b", "the shapes of meta-llama/Llama-3.2-1B (llama3 RoPE, tied)"},
        {"qwen3-30b-a3b", "the shapes of Qwen/Qwen3-30B-A3B (128 experts top-8, 48 layers)"},
    };
    return presets;
}

Result<ModelConfig> preset_config(std::string_view name) { return build(name); }

}  // namespace hp::model
