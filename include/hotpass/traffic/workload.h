// Workload (DESIGN.md §6): a bounded, weighted list of engine-step shapes that stands for a
// Profile, plus sampled requests to replay. Derivation: the profile's simulated steps are grouped
// into cells (same octave of decode batch, prefill tokens and mean KV length). Decode-only cells
// and cells with prefill share the max_shapes slots in proportion to their step time (a kind with
// >= 5% of it gets at least one); within a kind the cells with the most step time are kept, each
// as its representative (a real simulated step); every other cell's time and steps are folded
// into the nearest kept cell of its kind (octave distance).
// weight = the share of simulated step time a shape stands for (weights sum to 1), so a candidate
// with per-shape time t_i against an incumbent's u_i has a speedup 1 / sum_i weight_i t_i / u_i.
// coverage = the share of step time in the kept cells before folding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/batch_shape.h"
#include "hotpass/traffic/profile.h"
#include "hotpass/traffic/request.h"

namespace hp::traffic {

enum class Tier { fast, slow };
inline constexpr size_t kMaxShapesFast = 4;
inline constexpr size_t kMaxShapesSlow = 16;

struct WorkloadShape {
    double weight = 0;           // share of step time, sums to 1 over the workload
    double step_share = 0;       // share of steps, sums to 1
    double profile_step_ms = 0;  // the profile's cost model on this shape
    StepShape shape;
};

struct Workload {
    std::string source;  // the profile's source
    Tier tier = Tier::slow;
    EngineLimits limits;
    StepCostModel cost;
    double coverage = 0;                // share of step time in kept cells (before folding)
    double predicted_tokens_per_s = 0;  // sum share*tokens / sum share*step_ms, cost model
    std::vector<WorkloadShape> shapes;  // by weight, descending
    std::vector<Request> requests;      // replay sample, in arrival order
};

struct WorkloadOptions {
    Tier tier = Tier::slow;
    size_t max_shapes = kMaxShapesSlow;  // at most kMaxShapesFast / kMaxShapesSlow for the tier
    size_t max_requests = 32;
};

std::string_view tier_name(Tier tier);
Result<Workload> derive_workload(const Profile &profile, const WorkloadOptions &options = {});
std::string format_workload(const Workload &workload);  // a readable table

}  // namespace hp::traffic
