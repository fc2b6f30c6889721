// ModelBinding: the plugin ABI's view (hp_model) of a Model's weights and an engine's KV cache.
// Serving fewer layers than the checkpoint has (the fast tier) binds only the first n_layer.
#pragma once

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
    const hp_model &view() const { return view_; }

private:
    ModelBinding() = default;
    hp_model view_{};
    std::vector<hp_layer> layers_;
    std::vector<hp_tensor> tensors_;
    std::vector<std::vector<hp_tensor>> expert_tensors_;  // per layer: gate[E], up[E], down[E]
};

hp_config to_abi_config(const model::ModelConfig &config, int n_layer);

}  // namespace hp::engine
