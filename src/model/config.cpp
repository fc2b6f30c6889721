// config.json parsing for the supported architectures, both transformers-4 and -5 spellings.
// Sources of truth: the published transformers configuration and modelling classes of each
// architecture (Llama, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE).
#include "hotpass/model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hotpass/core/json_text.h"
#include "hotpass/core/mapped_file.h"

namespace hp::model {
namespace {

using nlohmann::json;

struct ArchitectureInfo {
    Architecture arch;
    std::string_view hf_name;
    std::string_view model_type;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {Architecture::llama, "LlamaForCausalLM", "llama"},
    {Architecture::qwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::qwen3, "Qwen3ForCausalLM", "qwen3"},
    {Architecture::mixtral, "MixtralForCausalLM", "mixtral"},
    {Architecture::qwen2_moe, "Qwen2MoeForCausalLM", "qwen2_moe"},
    {Architecture::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
};

bool is_null_or_missing(const json &object, const char *key) {
    return !object.contains(key) || object.at(key).is_null();
}

// Reads an integer field; `fallback` when absent (or null) unless required.
Result<int> get_int(const json &object, const char *key, std::optional<int> fallback) {
    if (is_null_or_missing(object, key)) {
        if (fallback) return *fallback;
        return error("config.json: required field '{}' is missing", key);
    }
    const json &value = object.at(key);
    if (!value.is_number_integer()) return error("config.json: field '{}' must be an integer, got {}", key, json_summary(value));
    const int64_t number = value.get<int64_t>();
    if (number < 0 || number > INT32_MAX) return error("config.json: field '{}' = {} is out of range", key, number);
    return int(number);
}

Result<int> get_positive_int(const json &object, const char *key, std::optional<int> fallback) {
    auto value = get_int(object, key, fallback);
    if (value.ok() && *value <= 0) return error("config.json: field '{}' must be positive, got {}", key, *value);
    return value;
}

Result<double> get_number(const json &object, const char *key, std::optional<double> fallback) {
    if (is_null_or_missing(object, key)) {
        if (fallback) return *fallback;
        return error("config.json: required field '{}' is missing", key);
    }
    const json &value = object.at(key);
    if (!value.is_number()) return error("config.json: field '{}' must be a number, got {}", key, json_summary(value));
    // Every number here ends up in a float: out of float range is an error, not an inf.
    if (!(std::fabs(value.get<double>()) <= double(std::numeric_limits<float>::max()))) {
        return error("config.json: field '{}' = {} is out of range", key, json_summary(value));
    }
    return value.get<double>();
}

Result<bool> get_bool(const json &object, const char *key, bool fallback) {
    if (is_null_or_missing(object, key)) return fallback;
    const json &value = object.at(key);
    if (!value.is_boolean()) return error("config.json: field '{}' must be true or false, got {}", key, json_summary(value));
    return value.get<bool>();
}

Result<Architecture> parse_architecture(const json &root) {
    if (!root.contains("architectures") || !root["architectures"].is_array() || root["architectures"].empty()) {
        return error("config.json: 'architectures' must be a non-empty list, e.g. [\"LlamaForCausalLM\"]");
    }
    const json &first = root["architectures"][0];
    if (!first.is_string()) return error("config.json: 'architectures' must hold strings");
    const std::string name = first.get<std::string>();
    for (const auto &info : kArchitectures) {
        if (info.hf_name == name) return info.arch;
    }
    std::string supported;
    for (const auto &info : kArchitectures) supported += fmt::format("{}{}", supported.empty() ? "" : ", ", info.hf_name);
    return error("config.json: unsupported architecture '{}'; supported: {}", name, supported);
}

// RoPE: transformers-5 `rope_parameters` (holds rope_theta) or transformers-4 `rope_theta` +
// `rope_scaling` (whose type is spelled `type` or `rope_type`).
Status parse_rope(const json &root, ModelConfig &config) {
    json parameters = json::object();
    const char *where = "rope_parameters";
    if (!is_null_or_missing(root, "rope_parameters")) {
        parameters = root["rope_parameters"];
    } else if (!is_null_or_missing(root, "rope_scaling")) {
        parameters = root["rope_scaling"];
        where = "rope_scaling";
    }
    if (!parameters.is_object()) return error("config.json: '{}' must be an object", where);
    if (parameters.contains("rope_theta")) {
        auto theta = get_number(parameters, "rope_theta", std::nullopt);
        if (!theta.ok()) return Error{theta.error()};
        config.rope_theta = float(*theta);
    } else {
        // The transformers config class's default where the file has none: MixtralConfig 1e6, the others 10000.
        auto theta = get_number(root, "rope_theta", config.arch == Architecture::mixtral ? 1e6 : 10000.0);
        if (!theta.ok()) return Error{theta.error()};
        config.rope_theta = float(*theta);
    }
    if (!(config.rope_theta > 0.0f)) return error("config.json: rope_theta must be positive");

    std::string type = "default";
    for (const char *key : {"rope_type", "type"}) {
        if (!is_null_or_missing(parameters, key)) {
            if (!parameters[key].is_string()) return error("config.json: {}.{} must be a string", where, key);
            type = parameters[key].get<std::string>();
            break;
        }
    }
    if (type == "default") {
        config.rope_type = RopeType::default_;
    } else if (type == "llama3") {
        config.rope_type = RopeType::llama3;
        auto factor = get_number(parameters, "factor", std::nullopt);
        auto low = get_number(parameters, "low_freq_factor", std::nullopt);
        auto high = get_number(parameters, "high_freq_factor", std::nullopt);
        auto original = get_positive_int(parameters, "original_max_position_embeddings", std::nullopt);
        for (const std::string *message : {factor.ok() ? nullptr : &factor.error(), low.ok() ? nullptr : &low.error(),
                                           high.ok() ? nullptr : &high.error(), original.ok() ? nullptr : &original.error()}) {
            if (message) return error("{} (in {} of type llama3)", *message, where);
        }
        if (!(*factor > 0) || !(*high > *low)) {
            return error("config.json: {} llama3 needs factor > 0 and high_freq_factor > low_freq_factor", where);
        }
        config.rope_factor = float(*factor);
        config.rope_low_freq_factor = float(*low);
        config.rope_high_freq_factor = float(*high);
        config.rope_original_max_position = *original;
    } else {
        return error("config.json: {}.rope_type '{}' is not supported (supported: default, llama3)", where, type);
    }
    if (!is_null_or_missing(root, "partial_rotary_factor")) {
        auto partial = get_number(root, "partial_rotary_factor", 1.0);
        if (!partial.ok() || *partial != 1.0) {
            return error("config.json: partial_rotary_factor {} is not supported (only 1.0)", json_summary(root["partial_rotary_factor"]));
        }
    }
    return Status::success();
}

// Fields that change the math and that hotpass does not implement.
Status reject_unsupported(const json &root, Architecture arch) {
    if (!is_null_or_missing(root, "hidden_act")) {
        if (!root["hidden_act"].is_string() || root["hidden_act"].get<std::string>() != "silu") {
            return error("config.json: hidden_act {} is not supported (only \"silu\")", json_summary(root["hidden_act"]));
        }
    }
    if (!is_null_or_missing(root, "quantization_config")) {
        return error("config.json: quantized checkpoints (quantization_config) are not supported");
    }
    for (const char *key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
        if (!is_null_or_missing(root, key)) return error("config.json: {} is not supported", key);
    }
    // Mistral-family models apply `sliding_window` whenever it is set; the Qwen family only when
    // `use_sliding_window` is true.
    const bool qwen = arch == Architecture::qwen2 || arch == Architecture::qwen3 ||
                      arch == Architecture::qwen2_moe || arch == Architecture::qwen3_moe;
    if (qwen) {
        auto use = get_bool(root, "use_sliding_window", false);
        if (!use.ok()) return Error{use.error()};
        if (*use) return error("config.json: use_sliding_window = true (sliding_window {}) is not supported", json_summary(root.value("sliding_window", json())));
    } else if (!is_null_or_missing(root, "sliding_window")) {
        return error("config.json: sliding_window = {} is active for this architecture and is not supported", json_summary(root["sliding_window"]));
    }
    return Status::success();
}

Status parse_moe(const json &root, ModelConfig &config) {
    const bool mixtral = config.arch == Architecture::mixtral;
    const bool qwen_moe = config.arch == Architecture::qwen2_moe || config.arch == Architecture::qwen3_moe;
    if (!mixtral && !qwen_moe) {
        config.layer_is_moe.assign(size_t(config.n_layer), false);
        return Status::success();
    }
    // num_experts (Qwen, transformers 4) and num_local_experts (Mixtral; transformers 5 alias).
    const char *experts_key = !is_null_or_missing(root, "num_local_experts") ? "num_local_experts" : "num_experts";
    auto n_expert = get_positive_int(root, experts_key, std::nullopt);
    if (!n_expert.ok()) return error("{} (or num_local_experts)", n_expert.error());
    auto n_used = get_positive_int(root, "num_experts_per_tok", std::nullopt);
    if (!n_used.ok()) return Error{n_used.error()};
    if (*n_used > *n_expert) return error("config.json: num_experts_per_tok {} > number of experts {}", *n_used, *n_expert);
    if (*n_expert > kMaxExperts) return error("config.json: {} {} is more than the {} hotpass takes", experts_key, *n_expert, kMaxExperts);
    config.n_expert = *n_expert;
    config.n_expert_used = *n_used;

    if (mixtral) {
        config.d_ff_expert = config.d_ff;  // Mixtral experts use intermediate_size
        config.norm_topk_prob = true;      // Mixtral always renormalises the top-k weights
        config.layer_is_moe.assign(size_t(config.n_layer), true);
        return Status::success();
    }
    auto d_ff_expert = get_positive_int(root, "moe_intermediate_size", std::nullopt);
    if (!d_ff_expert.ok()) return Error{d_ff_expert.error()};
    config.d_ff_expert = *d_ff_expert;
    auto norm = get_bool(root, "norm_topk_prob", false);
    if (!norm.ok()) return Error{norm.error()};
    config.norm_topk_prob = *norm;
    auto step = get_positive_int(root, "decoder_sparse_step", 1);
    if (!step.ok()) return Error{step.error()};
    std::vector<int> mlp_only;
    if (!is_null_or_missing(root, "mlp_only_layers")) {
        if (!root["mlp_only_layers"].is_array()) return error("config.json: mlp_only_layers must be a list of layer indices");
        for (const json &index : root["mlp_only_layers"]) {
            if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() >= config.n_layer) {
                return error("config.json: mlp_only_layers holds {}, not a layer index below {}", json_summary(index), config.n_layer);
            }
            mlp_only.push_back(index.get<int>());
        }
    }
    config.layer_is_moe.resize(size_t(config.n_layer));
    for (int layer = 0; layer < config.n_layer; ++layer) {
        const bool dense_listed = std::find(mlp_only.begin(), mlp_only.end(), layer) != mlp_only.end();
        config.layer_is_moe[size_t(layer)] = !dense_listed && (layer + 1) % *step == 0;
    }
    if (config.arch == Architecture::qwen2_moe) {
        auto shared = get_int(root, "shared_expert_intermediate_size", 0);
        if (!shared.ok()) return Error{shared.error()};
        config.d_ff_shared_expert = *shared;
    }
    return Status::success();
}

Status parse_token_ids(const json &root, ModelConfig &config) {
    auto bos = get_int(root, "bos_token_id", -1);
    if (!bos.ok()) return Error{bos.error()};
    config.bos_token_id = *bos;
    if (is_null_or_missing(root, "eos_token_id")) return Status::success();
    const json &eos = root["eos_token_id"];
    if (eos.is_number_integer()) {
        if (eos.get<int64_t>() < 0 || eos.get<int64_t>() > INT32_MAX) return error("config.json: eos_token_id {} is out of range", json_summary(eos));
        config.eos_token_ids.push_back(eos.get<int>());
    } else if (eos.is_array()) {
        for (const json &id : eos) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
                return error("config.json: eos_token_id list must hold token ids, got {}", json_summary(id));
            }
            config.eos_token_ids.push_back(id.get<int>());
        }
    } else {
        return error("config.json: eos_token_id must be an integer or a list, got {}", json_summary(eos));
    }
    return Status::success();
}

Result<ModelConfig> parse_config_json(const json &root) {
    if (!root.is_object()) return error("config.json: the top level must be an object");
    auto arch = parse_architecture(root);
    if (!arch.ok()) return Error{arch.error()};
    ModelConfig config;
    config.arch = *arch;
    HP_TRY(reject_unsupported(root, config.arch));

    struct IntField {
        const char *key;
        int *target;
    };
    for (IntField field : {IntField{"vocab_size", &config.n_vocab}, IntField{"hidden_size", &config.d_model},
                           IntField{"num_hidden_layers", &config.n_layer}, IntField{"num_attention_heads", &config.n_head},
                           IntField{"intermediate_size", &config.d_ff}}) {
        auto value = get_positive_int(root, field.key, std::nullopt);
        if (!value.ok()) return Error{value.error()};
        *field.target = *value;
    }
    // Every layer (and below, every expert) becomes entries of the expected-tensor list before the
    // checkpoint is compared with it: a count far past any model is refused here, not by the allocator.
    if (config.n_layer > kMaxLayers) return error("config.json: num_hidden_layers {} is more than the {} hotpass takes", config.n_layer, kMaxLayers);
    auto n_head_kv = get_positive_int(root, "num_key_value_heads", config.n_head);
    if (!n_head_kv.ok()) return Error{n_head_kv.error()};
    config.n_head_kv = *n_head_kv;
    if (config.n_head % config.n_head_kv != 0) {
        return error("config.json: num_attention_heads {} is not a multiple of num_key_value_heads {}", config.n_head, config.n_head_kv);
    }
    if (is_null_or_missing(root, "head_dim") && config.arch != Architecture::qwen3 && config.d_model % config.n_head != 0) {
        return error("config.json: hidden_size {} is not a multiple of num_attention_heads {} and head_dim is not given", config.d_model, config.n_head);
    }
    // Qwen3Config's class default head_dim is 128 when the key is absent; elsewhere, and when
    // it is null, head_dim = hidden_size / num_attention_heads.
    const bool qwen3_default = config.arch == Architecture::qwen3 && !root.contains("head_dim");
    auto d_head = get_positive_int(root, "head_dim", qwen3_default ? 128 : config.d_model / config.n_head);
    if (!d_head.ok()) return Error{d_head.error()};
    config.d_head = *d_head;
    if (config.d_head % 2 != 0) return error("config.json: head_dim {} must be even for RoPE", config.d_head);
    auto max_position = get_positive_int(root, "max_position_embeddings", 4096);
    if (!max_position.ok()) return Error{max_position.error()};
    config.max_position = *max_position;
    auto eps = get_number(root, "rms_norm_eps", config.arch == Architecture::mixtral ? 1e-5 : 1e-6);  // as MixtralConfig / the others
    if (!eps.ok()) return Error{eps.error()};
    config.norm_eps = float(*eps);
    auto init_range = get_number(root, "initializer_range", 0.02);
    if (!init_range.ok()) return Error{init_range.error()};
    config.initializer_range = float(*init_range);
    auto tied = get_bool(root, "tie_word_embeddings", false);
    if (!tied.ok()) return Error{tied.error()};
    config.tied_embeddings = *tied;

    // The dtype the weights were saved in: transformers 5 `dtype`, transformers 4 `torch_dtype`.
    const char *dtype_key = !is_null_or_missing(root, "dtype") ? "dtype" : "torch_dtype";
    if (!is_null_or_missing(root, dtype_key)) {
        const std::string name = root[dtype_key].is_string() ? root[dtype_key].get<std::string>() : "";
        if (name == "bfloat16") config.dtype = DType::bf16;
        else if (name == "float16") config.dtype = DType::f16;
        else if (name == "float32") config.dtype = DType::f32;
        else return error("config.json: {} {} is not supported (bfloat16, float16, float32)", dtype_key, json_summary(root[dtype_key]));
    }

    HP_TRY(parse_rope(root, config));

    // Biases and q/k norms, per architecture (from each modelling file's nn.Linear(bias=...)).
    switch (config.arch) {
        case Architecture::llama: {
            auto attention_bias = get_bool(root, "attention_bias", false);
            auto mlp_bias = get_bool(root, "mlp_bias", false);
            if (!attention_bias.ok()) return Error{attention_bias.error()};
            if (!mlp_bias.ok()) return Error{mlp_bias.error()};
            config.qkv_bias = config.o_bias = *attention_bias;
            config.mlp_bias = *mlp_bias;
            break;
        }
        case Architecture::qwen2:
            config.qkv_bias = true;
            break;
        case Architecture::qwen2_moe: {
            auto qkv_bias = get_bool(root, "qkv_bias", true);
            if (!qkv_bias.ok()) return Error{qkv_bias.error()};
            config.qkv_bias = *qkv_bias;
            break;
        }
        case Architecture::qwen3:
        case Architecture::qwen3_moe: {
            auto attention_bias = get_bool(root, "attention_bias", false);
            if (!attention_bias.ok()) return Error{attention_bias.error()};
            config.qkv_bias = config.o_bias = *attention_bias;
            config.qk_norm = true;
            break;
        }
        case Architecture::mixtral:
            break;
    }
    HP_TRY(parse_moe(root, config));
    HP_TRY(parse_token_ids(root, config));
    return config;
}

}  // namespace

std::string_view architecture_hf_name(Architecture arch) {
    for (const auto &info : kArchitectures) {
        if (info.arch == arch) return info.hf_name;
    }
    return "?";
}

std::string_view architecture_model_type(Architecture arch) {
    for (const auto &info : kArchitectures) {
        if (info.arch == arch) return info.model_type;
    }
    return "?";
}

Result<ModelConfig> parse_config(std::string_view json_text) {
    json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return error("config.json: not valid JSON");
    return parse_config_json(root);
}

Result<ModelConfig> load_config(const std::filesystem::path &dir) {
    const std::filesystem::path path = dir / "config.json";
    if (!std::filesystem::exists(path)) {
        return error("{}: no config.json (is this a Hugging Face checkpoint folder?)", dir.string());
    }
    auto text = read_text_file(path);
    if (!text.ok()) return Error{text.error()};
    auto config = parse_config(*text);
    if (!config.ok()) return error("{}: {}", path.string(), config.error());
    return config;
}

std::string config_to_json(const ModelConfig &config) {
    json root;
    root["architectures"] = {std::string(architecture_hf_name(config.arch))};
    root["model_type"] = std::string(architecture_model_type(config.arch));
    root["vocab_size"] = config.n_vocab;
    root["hidden_size"] = config.d_model;
    root["num_hidden_layers"] = config.n_layer;
    root["num_attention_heads"] = config.n_head;
    root["num_key_value_heads"] = config.n_head_kv;
    root["head_dim"] = config.d_head;
    root["intermediate_size"] = config.d_ff;
    root["rms_norm_eps"] = config.norm_eps;
    root["max_position_embeddings"] = config.max_position;
    root["hidden_act"] = "silu";
    root["initializer_range"] = config.initializer_range;
    root["tie_word_embeddings"] = config.tied_embeddings;
    root["dtype"] = config.dtype == DType::bf16 ? "bfloat16" : config.dtype == DType::f16 ? "float16" : "float32";
    json rope = {{"rope_theta", config.rope_theta}, {"rope_type", config.rope_type == RopeType::llama3 ? "llama3" : "default"}};
    if (config.rope_type == RopeType::llama3) {
        rope["factor"] = config.rope_factor;
        rope["low_freq_factor"] = config.rope_low_freq_factor;
        rope["high_freq_factor"] = config.rope_high_freq_factor;
        rope["original_max_position_embeddings"] = config.rope_original_max_position;
    }
    root["rope_parameters"] = rope;
    switch (config.arch) {
        case Architecture::llama:
            root["attention_bias"] = config.qkv_bias;
            root["mlp_bias"] = config.mlp_bias;
            break;
        case Architecture::qwen3:
        case Architecture::qwen3_moe:
            root["attention_bias"] = config.qkv_bias;
            break;
        case Architecture::qwen2_moe:
            root["qkv_bias"] = config.qkv_bias;
            break;
        default:
            break;
    }
    if (config.arch == Architecture::qwen2 || config.arch == Architecture::qwen3 ||
        config.arch == Architecture::qwen2_moe || config.arch == Architecture::qwen3_moe) {
        root["use_sliding_window"] = false;
    }
    if (config.is_moe()) {
        root["num_experts_per_tok"] = config.n_expert_used;
        if (config.arch == Architecture::mixtral) {
            root["num_local_experts"] = config.n_expert;
        } else {
            root["num_experts"] = config.n_expert;
            root["moe_intermediate_size"] = config.d_ff_expert;
            root["norm_topk_prob"] = config.norm_topk_prob;
            root["decoder_sparse_step"] = 1;
            json mlp_only = json::array();
            for (int layer = 0; layer < config.n_layer; ++layer) {
                if (!config.layer_is_moe[size_t(layer)]) mlp_only.push_back(layer);
            }
            root["mlp_only_layers"] = mlp_only;
            if (config.arch == Architecture::qwen2_moe) {
                root["shared_expert_intermediate_size"] = config.d_ff_shared_expert;
            }
        }
    }
    if (config.bos_token_id >= 0) root["bos_token_id"] = config.bos_token_id;
    if (config.eos_token_ids.size() == 1) root["eos_token_id"] = config.eos_token_ids[0];
    else if (!config.eos_token_ids.empty()) root["eos_token_id"] = config.eos_token_ids;
    root["transformers_version"] = "5.0.0";
    return root.dump(2) + "\n";
}

}  // namespace hp::model
