// Verifier: turns the executor's verification measurements into a verdict. Logits must be within
// rtol * max|reference logits| and new KV entries within the same rule; the defaults (2e-3) are
// for the executor's f32 KV cache and f32 accumulation (the CPU baseline stays near 1e-5). A
// bf16/f16 KV cache needs about 2e-2 (tests/forward measure 1.5e-2 for bf16). Greedy decodes must
// be identical up to a first divergence where each side's token is in the other's top-5
// (vLLM's check_logprobs_close).
#pragma once

#include <nlohmann/json.hpp>

#include "hotpass/tune/verdict.h"

namespace hp::tune {

struct Tolerance {
    double logits_rtol = 2e-3;
    double kv_rtol = 2e-3;
};

// `verify_result` is the executor's reply to `verify`. Returns code "ok" when every check passed.
Verdict judge_verification(const nlohmann::json &verify_result, const Tolerance &tolerance);

}  // namespace hp::tune
