// Verifier: turns the executor's verification measurements into a verdict. Tolerances are
// dtype-aware: logits within rtol * max|reference logits| (rtol 2e-3 with an f32 KV cache,
// 2e-2 with bf16/f16), new KV entries within the same rule, greedy decodes identical up to a
// first divergence where each side's token is in the other's top-5 (vLLM's check_logprobs_close).
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
