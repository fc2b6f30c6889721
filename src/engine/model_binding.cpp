#include "hotpass/engine/model_binding.h"

#include <string>

#include "hotpass/core/hash.h"

namespace hp::engine {

using model::Slot;

hp_config to_abi_config(const model::ModelConfig &config, int n_layer) {
    hp_config abi{};
    abi.n_vocab = config.n_vocab;
    abi.d_model = config.d_model;
    abi.n_layer = n_layer;
    abi.n_layer_model = config.n_layer;
    abi.n_head = config.n_head;
    abi.n_head_kv = config.n_head_kv;
    abi.d_head = config.d_head;
    abi.d_ff = config.d_ff;
    abi.norm_eps = config.norm_eps;
    abi.rope_theta = config.rope_theta;
    abi.rope_type = config.rope_type == model::RopeType::llama3 ? HP_ROPE_LLAMA3 : HP_ROPE_DEFAULT;
    abi.rope_factor = config.rope_factor;
    abi.rope_low_freq_factor = config.rope_low_freq_factor;
    abi.rope_high_freq_factor = config.rope_high_freq_factor;
    abi.rope_original_max_position = config.rope_original_max_position;
    abi.has_qk_norm = config.qk_norm;
    abi.tied_embeddings = config.tied_embeddings;
    abi.n_expert = config.n_expert;
    abi.n_expert_used = config.n_expert_used;
    abi.d_ff_expert = config.d_ff_expert;
    abi.norm_topk_prob = config.norm_topk_prob;
    abi.d_ff_shared_expert = config.d_ff_shared_expert;
    return abi;
}

Result<model::Model> preset_shell(std::string_view spec, DType dtype) {
    if (!spec.starts_with("preset:")) return error("'{}' is not a preset:NAME", spec);
    auto config = model::preset_config(spec.substr(7));
    if (!config.ok()) return Error{config.error()};
    config->dtype = dtype;
    model::Model model;
    model.config = std::move(config).value();
    model.source = std::string(spec);
    for (model::TensorSpec &tensor_spec : model::expected_tensors(model.config)) {
        uint64_t n_byte = dtype_size(dtype);
        for (int64_t extent : tensor_spec.shape) n_byte *= uint64_t(extent);
        model.tensors.push_back(model::TensorView{std::move(tensor_spec), dtype, nullptr, n_byte});
    }
    return model;
}

Result<std::unique_ptr<ModelBinding>> ModelBinding::create(const model::Model &model, const KvCache &kv, int n_layer) {
    return create(model, kv, n_layer, HP_DEVICE_CPU, {});
}

Result<std::unique_ptr<ModelBinding>> ModelBinding::create(const model::Model &model, const KvCache &kv, int n_layer,
                                                           hp_device device, const std::vector<const void *> &tensor_data) {
    if (!tensor_data.empty() && tensor_data.size() != model.tensors.size()) {
        return error("model binding: {} device tensors for {} model tensors", tensor_data.size(), model.tensors.size());
    }
    const model::ModelConfig &config = model.config;
    if (n_layer <= 0 || n_layer > config.n_layer) n_layer = config.n_layer;
    std::unique_ptr<ModelBinding> binding(new ModelBinding());
    binding->layers_.resize(size_t(n_layer));
    binding->expert_tensors_.resize(size_t(n_layer));
    for (int layer = 0; layer < n_layer; ++layer) {
        binding->layers_[size_t(layer)].is_moe = config.layer_is_moe[size_t(layer)];
        binding->expert_tensors_[size_t(layer)].resize(size_t(3 * config.n_expert));
    }
    hp_model &view = binding->view_;
    view.device = device;
    view.config = to_abi_config(config, n_layer);
    view.kv = &kv.view();
    binding->kv_view_ = &kv.view();
    binding->kv_k_ = kv.view().k;
    binding->kv_v_ = kv.view().v;

    for (size_t index = 0; index < model.tensors.size(); ++index) {
        const model::TensorView &tensor = model.tensors[index];
        if (tensor.spec.layer >= n_layer) continue;
        hp_tensor abi{};
        abi.name = tensor.spec.name.c_str();
        abi.dtype = hp_dtype(tensor.dtype);
        abi.n_dim = int32_t(tensor.spec.shape.size());
        for (size_t d = 0; d < tensor.spec.shape.size() && d < 4; ++d) abi.shape[d] = tensor.spec.shape[d];
        abi.data = tensor_data.empty() ? tensor.data : tensor_data[index];
        binding->tensors_.push_back(abi);

        if (tensor.spec.layer < 0) {
            switch (tensor.spec.slot) {
                case Slot::token_embd: view.token_embd = abi; break;
                case Slot::output_norm: view.output_norm = abi; break;
                case Slot::lm_head: view.lm_head = abi; break;
                default: HP_CHECK(false, "unexpected global tensor {}", tensor.spec.name);
            }
            continue;
        }
        hp_layer &layer = binding->layers_[size_t(tensor.spec.layer)];
        std::vector<hp_tensor> &experts = binding->expert_tensors_[size_t(tensor.spec.layer)];
        switch (tensor.spec.slot) {
            case Slot::attn_norm: layer.attn_norm = abi; break;
            case Slot::wq: layer.wq = abi; break;
            case Slot::wk: layer.wk = abi; break;
            case Slot::wv: layer.wv = abi; break;
            case Slot::wo: layer.wo = abi; break;
            case Slot::bq: layer.bq = abi; break;
            case Slot::bk: layer.bk = abi; break;
            case Slot::bv: layer.bv = abi; break;
            case Slot::bo: layer.bo = abi; break;
            case Slot::q_norm: layer.q_norm = abi; break;
            case Slot::k_norm: layer.k_norm = abi; break;
            case Slot::ffn_norm: layer.ffn_norm = abi; break;
            case Slot::w_gate: layer.w_gate = abi; break;
            case Slot::w_up: layer.w_up = abi; break;
            case Slot::w_down: layer.w_down = abi; break;
            case Slot::b_gate: layer.b_gate = abi; break;
            case Slot::b_up: layer.b_up = abi; break;
            case Slot::b_down: layer.b_down = abi; break;
            case Slot::router: layer.router = abi; break;
            case Slot::expert_gate: experts[size_t(tensor.spec.expert)] = abi; break;
            case Slot::expert_up: experts[size_t(config.n_expert + tensor.spec.expert)] = abi; break;
            case Slot::expert_down: experts[size_t(2 * config.n_expert + tensor.spec.expert)] = abi; break;
            case Slot::shared_gate: layer.shared_gate = abi; break;
            case Slot::shared_up: layer.shared_up = abi; break;
            case Slot::shared_down: layer.shared_down = abi; break;
            case Slot::shared_expert_gate: layer.shared_expert_gate = abi; break;
            default: HP_CHECK(false, "unexpected layer tensor {}", tensor.spec.name);
        }
    }
    if (config.tied_embeddings) view.lm_head = view.token_embd;
    for (int layer = 0; layer < n_layer; ++layer) {
        if (!binding->layers_[size_t(layer)].is_moe) continue;
        const hp_tensor *experts = binding->expert_tensors_[size_t(layer)].data();
        binding->layers_[size_t(layer)].expert_gate = experts;
        binding->layers_[size_t(layer)].expert_up = experts + config.n_expert;
        binding->layers_[size_t(layer)].expert_down = experts + 2 * config.n_expert;
    }
    view.layers = binding->layers_.data();
    view.tensors = binding->tensors_.data();
    view.n_tensors = int32_t(binding->tensors_.size());
    return binding;
}

uint64_t ModelBinding::fingerprint() const {
    Hasher64 hasher;  // the pieces hashed in place (qwen3-30b-a3b's description is ~2 MB)
    auto add = [&](const void *data, size_t n) { hasher.add(data, n); };
    add(&view_, sizeof view_);
    add(layers_.data(), layers_.size() * sizeof(hp_layer));
    add(tensors_.data(), tensors_.size() * sizeof(hp_tensor));
    for (const auto &experts : expert_tensors_) add(experts.data(), experts.size() * sizeof(hp_tensor));
    if (kv_view_) {
        add(kv_view_, sizeof *kv_view_);
        const size_t n_layer = layers_.size();  // not view_.config's: that is what is being checked
        if (kv_k_) add(kv_k_, n_layer * sizeof(void *));
        if (kv_v_) add(kv_v_, n_layer * sizeof(void *));
    }
    return hasher.digest();
}

}  // namespace hp::engine
