// Private to the executor: its state and the verify/measure procedures (executor_*.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "hotpass/backend/backend.h"
#include "hotpass/engine/batch.h"
#include "hotpass/engine/device_step.h"
#include "hotpass/engine/executor.h"
#include "hotpass/engine/model_binding.h"
#include "hotpass/engine/plugin.h"
#include "hotpass/model/model.h"

namespace hp::engine {

// A decode step captured as a CUDA graph for one plugin and one batch shape: the device buffers
// it reads (batch arrays) and writes (logits) keep their addresses; a replay takes new token ids
// uploaded into the same buffer.
struct ShapeGraph {
    std::unique_ptr<DeviceBuffers> buffers;  // 0: packed batch arrays, 1: logits
    std::unique_ptr<backend::Graph> graph;
    PackedBatch packed;                      // host copy of what buffer 0 holds
    hp_batch device_batch{};                 // the step over buffer 0 (scalars + device pointers)
    size_t n_logit = 0;                      // floats of logits
    std::string failure;                     // why there is no graph (the step runs eagerly)
    double capture_ms = 0;                   // eager warm-up + capture + instantiate
};

// A sticky device error (CUDA context poisoned): the executor reports it and exits with
// kExitDeviceFault; nothing else may run in this process.
struct DeviceFault : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct ExecutorState {
    ~ExecutorState();
    ExecutorOptions options;
    std::unique_ptr<backend::Backend> backend;  // host memcpy on the CPU
    DeviceWeights device_weights;               // CUDA only
    uint64_t weights_checksum = 0;              // CUDA: of device_weights, at start-up
    std::unique_ptr<DeviceBuffers> buffers;     // CUDA: batch arrays (0), logits (1) of eager calls
    // Graphs by shape, for the incumbent (kept across candidates: unload restores nothing because
    // nothing of the incumbent was touched) and for the loaded candidate (destroyed at unload,
    // before the candidate's code is unloaded).
    std::map<std::string, ShapeGraph> incumbent_graphs, candidate_graphs;
    model::Model model;
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<ModelBinding> binding;
    uint64_t model_fingerprint = 0;  // binding->fingerprint() at start-up, checked after every request
    std::unique_ptr<ForwardPlugin> reference;
    std::unique_ptr<ForwardPlugin> incumbent;
    std::unique_ptr<ForwardPlugin> candidate;
    std::string candidate_path;
    int n_load = 0;
    int threads_before_load = 0;
    nlohmann::json startup;            // seconds per start-up phase
    double read_bandwidth_gbs = 0;     // measured at start-up
    uint64_t bytes_per_decode_step = 0;  // weights one decode step reads (served layers)
    std::vector<float> history_scale;  // per layer: RMS of real K rows, then V rows (random histories)

    const hp_model &abi() const { return binding->view(); }
    bool on_cuda() const { return options.device == backend::DeviceKind::cuda; }
    int n_vocab() const { return model.config.n_vocab; }
};

// One sequence of a verification or timing batch, with its KV blocks.
struct TrialSequence {
    std::vector<int32_t> history;  // tokens already in the cache before the step
    std::vector<int32_t> tokens;   // tokens of the step
    std::vector<int32_t> blocks;
    bool all_logits = false;
};

// The bit pattern logits are poisoned with before every call: a quiet NaN with a payload that
// arithmetic does not produce, so "never written" and "computed NaN" are told apart.
constexpr uint32_t kPoisonBits = 0x7fc0deadu;

// What a single plugin call did, as the verifier needs to know it.
struct CallReport {
    std::vector<float> logits;  // [rows][n_vocab]
    bool canary_intact = true;  // nothing written just outside the logits buffer
    bool inputs_intact = true;  // the batch arrays are unchanged
    std::string error;          // the plugin's return code, if it failed
    double seconds = 0;
};

// Runs `plugin` on the sequences' step tokens (KV for their histories must be in place). On CUDA
// the batch arrays and the poisoned, canary-fenced logits are device buffers; a sticky device
// error throws DeviceFault.
CallReport call_plugin(ExecutorState &state, ForwardPlugin &plugin, const std::vector<TrialSequence> &sequences,
                       BatchBuilder &builder);

// Allocates blocks for history + tokens; false when the cache is full (then nothing is held).
bool allocate_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences);
void release_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences);

// A workload shape: `decode_batch` sequences decoding one token after `decode_kv` cached tokens,
// plus prefill chunks of the given lengths. Token ids are zero; callers fill them.
std::vector<TrialSequence> shape_sequences(const nlohmann::json &shape);

// The logits of one call against the reference's: max_abs_delta, max_abs_ref, nan_rows,
// unwritten_rows (still poisoned), rows; the shape of a verification case (tune/verifier.h).
nlohmann::json compare_to_reference(const ExecutorState &state, const CallReport &expected, const std::vector<float> &actual);

nlohmann::json run_verify(ExecutorState &state, ForwardPlugin &target, const nlohmann::json &params);
nlohmann::json run_measure(ExecutorState &state, const nlohmann::json &params);

// CUDA: checksums the device weights; a change ends the process (kExitWroteWeights).
void check_device_weights(ExecutorState &state, const char *during);
// Exits with kExitWroteWeights when the model description handed to plugins changed (see executor.cpp).
void check_model_description(const ExecutorState &state, const char *during);

// KV-cache blocks as bytes, through the backend (device memory on CUDA).
size_t kv_block_bytes(const ExecutorState &state);

// Resident set size and thread count of this process, from /proc.
uint64_t resident_bytes();
int thread_count();

}  // namespace hp::engine
