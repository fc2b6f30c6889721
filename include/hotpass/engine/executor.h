// The persistent executor (DESIGN §2): loads a model once, then evaluates candidate forward passes
// one after another without reloading weights, serving the JSON-lines RPC of rpc.h on a unix
// socket. It holds three plugins over the same weights and KV cache: the trusted reference (for
// verification), the incumbent (the baseline, or the current best) and at most one candidate.
#pragma once

#include <filesystem>
#include <string>

#include "hotpass/backend/backend.h"
#include "hotpass/engine/kv_cache.h"

namespace hp::engine {

struct ExecutorOptions {
    std::string model;                 // checkpoint folder or preset:NAME
    uint64_t seed = 0;                 // preset weights
    int n_layer = 0;                   // 0: all (slow tier); N: the first N (fast tier)
    std::filesystem::path socket;
    std::string reference = "reference";  // the trusted plugin verification compares against
    std::string incumbent = "baseline";   // the plugin candidates are timed against
    int n_thread = 1;
    int max_loads = 32;                // recycle (exit after unload) after this many candidates
    bool sandbox = true;               // seccomp + fault classification (see sandbox.h)
    // CUDA: weights (uploaded once, or generated on the device for preset:NAME), KV cache and
    // plugins on device `device_index`; decode timing replays CUDA graphs (see executor_measure.cpp).
    backend::DeviceKind device = backend::DeviceKind::cpu;
    int device_index = 0;
    // Verification holds up to three copies of a batch's KV (candidate, incumbent or reference,
    // reference sample); a campaign's largest shape is ~3k tokens before block rounding.
    KvCacheOptions kv = {.max_tokens = 16384};
};

// Runs until `shutdown`, a recycle, or a lost connection. Returns the process exit code.
int run_executor(const ExecutorOptions &options);

}  // namespace hp::engine
