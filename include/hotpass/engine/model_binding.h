// ModelBinding: the plugin ABI's view (hp_model) of a Model's weights and an engine's KV cache.
// Serving fewer layers than the checkpoint has (the fast tier) binds only the first n_layer.
#pragma once

#include <string_view>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/engine/kv_cache.h"
#include "hotpass/forward_abi.h"
#include "hotpass/model/model.h"

namespace hp::engine {

class ModelBinding {
public:
    // `model` and `kv` must outlive the binding. n_layer <= 0 serves every layer.
    static Result<std::unique_ptr<ModelBinding>> create(const model::Model &model, const KvCache &kv, int n_layer);
    // The same view with weights on `device`: tensor_data[i] holds model.tensors[i] there (as
    // stored: same dtype, shape and bytes). Empty tensor_data: the model's own host memory.
    static Result<std::unique_ptr<ModelBinding>> create(const model::Model &model, const KvCache &kv, int n_layer,
                                                        hp_device device, const std::vector<const void *> &tensor_data);
    const hp_model &view() const { return view_; }
    // A hash of every byte of the description plugins are handed: hp_model, its config, layers,
    // tensor records (and expert arrays) and the KV cache's view with its layer pointers. It lives in
    // the executor's memory, which a plugin could write (`const` is only a promise): the executor
    // compares it after every call into candidate code.
    uint64_t fingerprint() const;

private:
    ModelBinding() = default;
    hp_model view_{};
    std::vector<hp_layer> layers_;
    std::vector<hp_tensor> tensors_;
    std::vector<std::vector<hp_tensor>> expert_tensors_;  // per layer: gate[E], up[E], down[E]
    // The KV cache's view and its layer pointer arrays as they were at create: fingerprint() reads
    // these, not the pointers in view_ a plugin could have overwritten.
    const hp_kv_cache *kv_view_ = nullptr;
    void *const *kv_k_ = nullptr;
    void *const *kv_v_ = nullptr;
};

hp_config to_abi_config(const model::ModelConfig &config, int n_layer);

// `preset:NAME`'s config and tensor specs with no weight memory (every data == nullptr), for an
// engine that generates the weights on its device (EngineOptions::synthetic) instead of on the host.
Result<model::Model> preset_shell(std::string_view spec, DType dtype);

}  // namespace hp::engine
