// ModelConfig: the fields of a Hugging Face `config.json` that change the forward pass's math,
// parsed from either the transformers-4 or the transformers-5 spelling. Anything that would change
// the math and is not implemented is a parse error naming the field, never a silent default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/dtype.h"
#include "hotpass/core/result.h"

namespace hp::model {

enum class Architecture { llama, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe };

std::string_view architecture_hf_name(Architecture arch);  // "LlamaForCausalLM", ...
std::string_view architecture_model_type(Architecture arch);  // "llama", ...

enum class RopeType { default_, llama3 };

// Limits parse_config enforces: far past any released model (hundreds of layers, hundreds of experts),
// low enough that the per-tensor lists built from a config stay small.
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxExperts = 4096;

struct ModelConfig {
    Architecture arch = Architecture::llama;
    int n_vocab = 0;
    int d_model = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int d_head = 0;
    int d_ff = 0;  // dense MLP width (intermediate_size)
    float norm_eps = 1e-6f;
    int max_position = 0;

    float rope_theta = 10000.0f;
    RopeType rope_type = RopeType::default_;
    float rope_factor = 1.0f;  // llama3 only, as are the next three
    float rope_low_freq_factor = 1.0f;
    float rope_high_freq_factor = 4.0f;
    int rope_original_max_position = 8192;

    bool qkv_bias = false;
    bool o_bias = false;
    bool mlp_bias = false;
    bool qk_norm = false;
    bool tied_embeddings = false;

    int n_expert = 0;  // 0: dense model
    int n_expert_used = 0;
    int d_ff_expert = 0;
    int d_ff_shared_expert = 0;  // 0: no shared expert
    bool norm_topk_prob = false;
    std::vector<bool> layer_is_moe;  // [n_layer]

    DType dtype = DType::bf16;  // the checkpoint's declared dtype
    float initializer_range = 0.02f;
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;

    bool is_moe() const { return n_expert > 0; }
};

// Parses the text of a config.json. Errors name the offending field.
Result<ModelConfig> parse_config(std::string_view json_text);
// Reads `<dir>/config.json`.
Result<ModelConfig> load_config(const std::filesystem::path &dir);
// Writes a config.json in transformers-5 spelling that parse_config() reads back identically.
std::string config_to_json(const ModelConfig &config);

}  // namespace hp::model
