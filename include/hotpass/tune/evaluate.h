// Evaluating one candidate end to end: build -> load into the executor -> verify -> time against
// the incumbent -> unload. Every failure along the way becomes a Verdict; nothing throws.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "hotpass/tune/builder.h"
#include "hotpass/tune/runner.h"
#include "hotpass/tune/supervisor.h"
#include "hotpass/tune/verdict.h"
#include "hotpass/tune/verifier.h"

namespace hp::tune {

// A prompt for the greedy-decode check: one of the traffic's sampled requests (its length, and
// its token ids where the trace has them).
struct GreedyPrompt {
    int length = 0;
    std::vector<int32_t> tokens;  // empty: random ids
};

struct EvaluateOptions {
    BuildOptions build;
    Tolerance tolerance;
    RunnerOptions runner;
    std::vector<Shape> shapes;
    int n_case = 12;            // random verification batches
    int greedy_steps = 8;
    std::vector<GreedyPrompt> greedy_prompts;  // empty: a short random prompt
    int max_seq = 5, max_history = 70, max_chunk = 37;  // bounds on random verification batches
    // Step tokens the plain reference runs per verification batch; a larger batch is checked whole
    // against the verified incumbent and on a random sample of this many tokens against the
    // reference (docs/architecture.md, "Verification"). 0: the reference runs every batch whole.
    int reference_tokens = 0;
    uint64_t verify_seed = 0;   // 0: fresh from std::random_device (the candidate cannot know it)
    double load_deadline_seconds = 30;
    double verify_deadline_seconds = 120;
    double measure_deadline_seconds = 600;  // at least: more where the shapes' time budgets need it (evaluate.cpp)
    double max_slowdown = 20;   // slower than this versus the incumbent on any shape: too_slow
    int64_t max_memory_growth_bytes = 64 << 20;
    // CUDA: host-clock median above 1.5 x the event median plus this is work escaping the stream.
    double escaped_work_ms = 0.1;
    bool measure = true;        // false: build + verify only
};

// How long the measure call may take: measure_deadline_seconds, or more where the shapes and the
// runner's time budgets need it.
double measure_deadline(const EvaluateOptions &options);

struct Evaluation {
    Candidate candidate;
    BuildOutcome build;
    Verdict verdict;
    nlohmann::json verification;             // the executor's verify reply
    std::optional<Measurement> measurement;
    double load_seconds = 0;                 // dlopen + create
    double hot_swap_seconds = 0;             // load request -> the whole verification done
    int executor_starts = 0;                 // executor starts during this evaluation
};

Evaluation evaluate_candidate(Supervisor &supervisor, const Candidate &candidate, const EvaluateOptions &options);
nlohmann::json evaluation_to_json(const Evaluation &evaluation);

}  // namespace hp::tune
