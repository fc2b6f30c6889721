// Runner: times a loaded candidate against the incumbent on a workload's batch shapes (the
// executor interleaves them ABAB with fresh inputs) and turns the samples into a Measurement:
// per shape and weighted medians, spread, speedup with a bootstrap interval drawn by blocks of two
// timed pairs (stats.h), a signed-rank test of the pairs, and whether the difference is significant and larger than the noise.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/tune/stats.h"

namespace hp::tune {

struct Shape {
    std::string name;
    double weight = 1.0;  // share of step time this shape stands for
    int decode_batch = 0;
    int decode_kv = 0;
    std::vector<int> prefill;  // chunk lengths
};

// Fewest timed pairs per shape under RunnerOptions::max_seconds: the fewest pairs with which the
// two-sided signed-rank test can reach alpha = 0.01 is 8 (p = 2/256 when all agree; 7 give 2/128).
constexpr int kMinRepCapped = 8;

struct RunnerOptions {
    int warmup = 2;
    int min_rep = 10;
    int max_rep = 1000;
    double target_seconds = 1.0;  // per shape
    // Once a shape has kMinRepCapped pairs, it stops after this many seconds even short of
    // min_rep (0: no cap): a 500-token prefill step of llama-300m takes ~6 s on one CPU thread, so
    // 15 pairs of it would take 3 minutes.
    double max_seconds = 0;
    double alpha = 0.01;          // rank-test significance level
    double min_effect = 0.01;     // speedups within 1% are noise, whatever the test says
    uint64_t seed = 1;
};

struct ShapeMeasurement {
    std::string name;
    double weight = 1;
    int n_token = 0;
    int n_sample = 0;
    double incumbent_ms = 0, candidate_ms = 0;  // medians
    double incumbent_iqr_ms = 0, candidate_iqr_ms = 0;
    double speedup = 1;  // incumbent / candidate
    Interval speedup_ci;
    double p_value = 1;
    bool significant = false;
};

struct Measurement {
    std::vector<ShapeMeasurement> shapes;
    double weighted_incumbent_ms = 0, weighted_candidate_ms = 0;
    double speedup = 1;
    Interval speedup_ci;
    bool significant = false;
    nlohmann::json raw;  // the executor's reply, minus samples
};

// Shapes from a workload file: {"shapes": [{"name", "weight", "decode_batch", "decode_kv", "prefill": [...]}]}
// (the form shapes_to_json writes); an error names the first field that is missing or of the wrong type.
Result<std::vector<Shape>> parse_shapes(const nlohmann::json &workload);
nlohmann::json shapes_to_json(const std::vector<Shape> &shapes);
// The built-in workloads used when none is given: a small mix of decode and prefill.
std::vector<Shape> default_shapes(bool fast_tier);

Measurement summarize(const nlohmann::json &measure_result, const std::vector<Shape> &shapes, const RunnerOptions &options);
nlohmann::json measurement_to_json(const Measurement &measurement);

}  // namespace hp::tune
