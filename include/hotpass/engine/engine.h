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

#include "hotpass/backend/backend.h"
#include "hotpass/core/result.h"
#include "hotpass/engine/device_step.h"
#include "hotpass/engine/kv_cache.h"
#include "hotpass/engine/model_binding.h"
#include "hotpass/engine/plugin.h"
#include "hotpass/model/model.h"

namespace hp::engine {

struct EngineOptions {
    std::string forward = "baseline";  // in-tree name (baseline, reference) or path to a plugin .so
    int n_layer = 0;                    // 0: all layers
    int n_thread = 1;
    KvCacheOptions kv;
    // Where weights, KV cache and the forward pass live. CUDA: weights are uploaded once (as
    // stored), or generated on the device from `synthetic` when the model has no host memory
    // (preset_shell); the batch arrays and outputs handed to the plugin are device pointers.
    backend::DeviceKind device = backend::DeviceKind::cpu;
    int device_index = 0;
    model::SyntheticOptions synthetic;  // seed etc. of a preset_shell model's weights
    bool warm_up = false;               // run one 1-token step before create() returns
};

// Start -> ready, per phase (milliseconds of host wall time, each ending in a device sync).
struct StartupTiming {
    double context_ms = 0;  // backend (CUDA context, stream)
    double weights_ms = 0;  // upload or on-device generation
    double kv_ms = 0;       // KV-cache allocation
    double plugin_ms = 0;   // load the .so, create()
    double warm_up_ms = 0;  // first step
    double total_ms() const { return context_ms + weights_ms + kv_ms + plugin_ms + warm_up_ms; }
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
    ~Engine();

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
    backend::Backend &device() const { return *backend_; }
    const StartupTiming &startup() const { return startup_; }
    // MoE routing counts accumulated over all steps, [n_layer][n_expert] (empty for dense).
    const std::vector<int32_t> &expert_counts() const { return expert_counts_; }

private:
    struct Sequence {
        int length = 0;           // tokens whose KV is in the cache
        std::vector<int32_t> blocks;
    };
    explicit Engine(const model::Model &model) : model_(model) {}
    Status run_plugin(const hp_batch &batch, hp_output &out);

    const model::Model &model_;
    std::unique_ptr<backend::Backend> backend_;  // declared first: destroyed last
    void *weight_arena_ = nullptr;               // device weights (CUDA), one allocation
    std::unique_ptr<DeviceBuffers> scratch_;      // CUDA: the step's batch arrays, logits, expert counts
    StartupTiming startup_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<ModelBinding> binding_;
    std::unique_ptr<ForwardPlugin> plugin_;
    std::map<int, Sequence> sequences_;
    int next_seq_ = 0;
    std::vector<int32_t> expert_counts_;
};

}  // namespace hp::engine
