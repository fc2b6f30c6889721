// Private to the executor: its state and the verify/measure procedures (executor_*.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <random>
#include <vector>

#include "hotpass/engine/batch.h"
#include "hotpass/engine/executor.h"
#include "hotpass/engine/model_binding.h"
#include "hotpass/engine/plugin.h"
#include "hotpass/model/model.h"

namespace hp::engine {

struct ExecutorState {
    ExecutorOptions options;
    model::Model model;
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<ModelBinding> binding;
    std::unique_ptr<ForwardPlugin> reference;
    std::unique_ptr<ForwardPlugin> incumbent;
    std::unique_ptr<ForwardPlugin> candidate;
    std::string candidate_path;
    int n_load = 0;
    int threads_before_load = 0;
    nlohmann::json startup;            // seconds per start-up phase
    double read_bandwidth_gbs = 0;     // measured at start-up
    uint64_t bytes_per_decode_step = 0;  // weights one decode step reads (served layers)

    const hp_model &abi() const { return binding->view(); }
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

// Runs `plugin` on the sequences' step tokens (KV for their histories must be in place).
CallReport call_plugin(ExecutorState &state, ForwardPlugin &plugin, const std::vector<TrialSequence> &sequences,
                       BatchBuilder &builder);

// Allocates blocks for history + tokens; false when the cache is full (then nothing is held).
bool allocate_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences);
void release_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences);

// A workload shape: `decode_batch` sequences decoding one token after `decode_kv` cached tokens,
// plus prefill chunks of the given lengths. Token ids are zero; callers fill them.
std::vector<TrialSequence> shape_sequences(const nlohmann::json &shape);

nlohmann::json run_verify(ExecutorState &state, ForwardPlugin &target, const nlohmann::json &params);
nlohmann::json run_measure(ExecutorState &state, const nlohmann::json &params);

// Resident set size and thread count of this process, from /proc.
uint64_t resident_bytes();
int thread_count();

}  // namespace hp::engine
