// Verdict: what the builder, verifier and runner concluded about one candidate. Every verdict has
// a machine-readable code and a human sentence. Plain data.
#pragma once

#include <string>

namespace hp::tune {

// Codes, in the order a candidate meets the gates:
//   build_failed, bad_exports                      the builder
//   load_failed, abi_mismatch                      the executor's load
//   crash, hang, forbidden_syscall, wrote_weights, device_fault   the supervisor (the executor died
//                                                  or hung; device_fault: a poisoned CUDA context)
//   plugin_error, wrong_output, unwritten_output, nan_output, kv_mismatch, wrote_inputs,
//   wrote_outside_outputs, nondeterministic, greedy_divergence        the verifier
//   leaks_memory, leaked_thread, impossible, wrong_after_timing, too_slow,
//   escaped_stream (CUDA: work outside the timed stream)                   the runner / unload
//   faster, not_faster                             verified; timed against the incumbent
struct Verdict {
    std::string code;
    std::string reason;

    bool correct() const { return code == "faster" || code == "not_faster"; }
    bool faster() const { return code == "faster"; }
};

}  // namespace hp::tune
