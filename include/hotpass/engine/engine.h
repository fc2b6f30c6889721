// Engine: a model, its KV cache and one loaded forward pass, driven one step at a time.
// It owns sequences (their positions and KV block tables) and turns a list of per-sequence token
// chunks into an hp_batch. This is the minimal engine path; the persistent executor builds on it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/engine/kv_cache.h"
#include "hotpass/engine/model_binding.h"
#include "hotpass/engine/plugin.h"
#include "hotpass/model/model.h"

namespace hp::engine {

struct EngineOptions {
    std::string forward = "reference";  // in-tree name or path to a plugin .so
    int n_layer = 0;                    // 0: all layers
    int n_thread = 1;
    KvCacheOptions kv;
};

// One sequence's share of a step: its next tokens (a prefill chunk, or one decode token).
struct StepInput {
    int seq = 0;
    std::span<const int32_t> tokens;
    bool all_logits = false;  // logits for every token; otherwise only for the last
};

class Engine {
public:
    // `model` must outlive the engine.
    static Result<std::unique_ptr<Engine>> create(const model::Model &model, const EngineOptions &options);

    int add_sequence();
    void remove_sequence(int seq);  // frees its KV blocks
    int sequence_length(int seq) const;

    // Runs one step. Returns logits [rows][n_vocab], rows in input order (every token of an
    // input with all_logits, else its last token). Fails without side effects on sequences
    // when the cache is full or a plugin reports an error.
    Result<std::vector<float>> step(const std::vector<StepInput> &inputs);

    const model::ModelConfig &config() const { return model_.config; }
    const hp_model &abi_model() const { return binding_->view(); }
    const ForwardPlugin &plugin() const { return *plugin_; }
    const KvCache &kv_cache() const { return *kv_; }
    // MoE routing counts accumulated over all steps, [n_layer][n_expert] (empty for dense).
    const std::vector<int32_t> &expert_counts() const { return expert_counts_; }

private:
    struct Sequence {
        int length = 0;           // tokens whose KV is in the cache
        std::vector<int32_t> blocks;
    };
    explicit Engine(const model::Model &model) : model_(model) {}

    const model::Model &model_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<ModelBinding> binding_;
    std::unique_ptr<ForwardPlugin> plugin_;
    std::map<int, Sequence> sequences_;
    int next_seq_ = 0;
    std::vector<int32_t> expert_counts_;
};

}  // namespace hp::engine
