// Workload derivation from the profile's step cells (see workload.h for the rule).
#include "hotpass/traffic/workload.h"

#include <algorithm>
#include <cmath>

#include "hotpass/traffic/profile_report.h"

namespace hp::traffic {

std::string_view tier_name(Tier tier) {
    return tier == Tier::fast ? "fast" : "slow";
}

namespace {

double octave_distance(const StepCell &a, const StepCell &b) {
    const auto square = [](double x) { return x * x; };
    return std::sqrt(square(double(a.decode_batch_octave) - b.decode_batch_octave) +
                     square(double(a.prefill_tokens_octave) - b.prefill_tokens_octave) +
                     square(double(a.kv_len_octave) - b.kv_len_octave));
}

}  // namespace

Result<Workload> derive_workload(const Profile &profile, const WorkloadOptions &options) {
    const size_t limit = options.tier == Tier::fast ? kMaxShapesFast : kMaxShapesSlow;
    if (options.max_shapes == 0 || options.max_shapes > limit)
        return error("max_shapes must be 1..{} for the {} tier, got {}", limit,
                     tier_name(options.tier), options.max_shapes);
    const BatchingSummary &batching = profile.batching;
    if (!batching.simulated)
        return error(
            "profile of {} has no batching simulation (it was made with --no-sim); profile the "
            "trace again without --no-sim",
            profile.source);
    if (batching.cells.empty())
        return profile.requests == 0
                   ? error(
                         "profile of {} holds no requests: no engine steps to derive a workload "
                         "from",
                         profile.source)
                   : error("profile of {} has {} requests but no simulated steps", profile.source,
                           profile.requests);

    std::vector<StepCell> cells = batching.cells;
    std::stable_sort(cells.begin(), cells.end(),
                     [](const StepCell &a, const StepCell &b) { return a.time_ms > b.time_ms; });
    // Kind 0: decode-only steps; kind 1: steps with prefill. Each kind gets slots in proportion
    // to its step time, at least one when it has >= 5% of it, so even 4 shapes exercise both.
    const auto kind = [](const StepCell &cell) { return cell.prefill_tokens_octave > 0 ? 1 : 0; };
    double total_ms = 0, kind_ms[2] = {0, 0};
    uint64_t total_steps = 0;
    size_t kind_cells[2] = {0, 0};
    for (const StepCell &cell : cells) {
        total_ms += cell.time_ms;
        total_steps += cell.steps;
        kind_ms[kind(cell)] += cell.time_ms;
        ++kind_cells[kind(cell)];
    }
    const size_t n_shapes = std::min(options.max_shapes, cells.size());
    size_t slots[2];
    for (int k = 0; k < 2; ++k) {
        const double share = total_ms > 0 ? kind_ms[k] / total_ms : 0;
        slots[k] = std::min(kind_cells[k], size_t(std::llround(share * double(n_shapes))));
        if (slots[k] == 0 && share >= 0.05 && kind_cells[k] > 0) slots[k] = 1;
    }
    while (slots[0] + slots[1] > n_shapes)
        --slots[kind_ms[0] * double(slots[1]) < kind_ms[1] * double(slots[0]) ? 0 : 1];
    while (slots[0] + slots[1] < n_shapes) ++slots[slots[0] < kind_cells[0] ? 0 : 1];
    std::vector<size_t> kept;  // indices into cells, by time
    size_t taken[2] = {0, 0};
    for (size_t i = 0; i < cells.size(); ++i)
        if (taken[kind(cells[i])] < slots[kind(cells[i])]) {
            ++taken[kind(cells[i])];
            kept.push_back(i);
        }
    double kept_ms = 0;
    for (size_t i : kept) kept_ms += cells[i].time_ms;
    // Fold every other cell into the nearest kept cell of its kind (of any kind if none).
    std::vector<double> time_ms(kept.size()), steps(kept.size());
    for (size_t i = 0; i < cells.size(); ++i) {
        size_t target = kept.size();
        for (size_t j = 0; j < kept.size(); ++j) {
            if (kept[j] == i) {
                target = j;
                break;
            }
            const bool same_kind = kind(cells[kept[j]]) == kind(cells[i]);
            if (target == kept.size()) {
                target = j;
                continue;
            }
            const bool target_same_kind = kind(cells[kept[target]]) == kind(cells[i]);
            if ((same_kind && !target_same_kind) ||
                (same_kind == target_same_kind &&
                 octave_distance(cells[i], cells[kept[j]]) <
                     octave_distance(cells[i], cells[kept[target]])))
                target = j;
        }
        time_ms[target] += cells[i].time_ms;
        steps[target] += double(cells[i].steps);
    }

    Workload workload;
    workload.source = profile.source;
    workload.tier = options.tier;
    workload.limits = batching.limits;
    workload.cost = batching.cost;
    workload.coverage = total_ms > 0 ? kept_ms / total_ms : 0;
    double weighted_tokens = 0, weighted_ms = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
        WorkloadShape shape;
        shape.shape = cells[kept[i]].representative;
        shape.weight = time_ms[i] / total_ms;
        shape.step_share = steps[i] / double(total_steps);
        shape.profile_step_ms = batching.cost.step_ms(shape.shape);
        weighted_tokens += shape.step_share * double(shape.shape.batched_tokens());
        weighted_ms += shape.step_share * shape.profile_step_ms;
        workload.shapes.push_back(std::move(shape));
    }
    std::stable_sort(
        workload.shapes.begin(), workload.shapes.end(),
        [](const WorkloadShape &a, const WorkloadShape &b) { return a.weight > b.weight; });
    workload.predicted_tokens_per_s = weighted_ms > 0 ? weighted_tokens / weighted_ms * 1000 : 0;
    const size_t n_requests = std::min(options.max_requests, profile.sample_requests.size());
    workload.requests.assign(profile.sample_requests.begin(),
                             profile.sample_requests.begin() + std::ptrdiff_t(n_requests));
    return workload;
}

std::string format_workload(const Workload &workload) {
    std::string text = fmt::format(
        "workload ({} tier) from {}: {} shapes covering {:.1f}% of step time, "
        "predicted {:.0f} tokens/s under the cost model\n",
        tier_name(workload.tier), workload.source, workload.shapes.size(), workload.coverage * 100,
        workload.predicted_tokens_per_s);
    text += fmt::format("{:>3} {:>7} {:>7} {:>6} {:>10} {:>9} {:>9}\n", "#", "weight", "steps",
                        "decode", "kv_len~", "prefill", "step_ms");
    for (size_t i = 0; i < workload.shapes.size(); ++i) {
        const WorkloadShape &shape = workload.shapes[i];
        double kv_sum = 0;
        for (uint32_t kv_len : shape.shape.decode_kv_len) kv_sum += kv_len;
        const double kv_mean = shape.shape.decode_batch() ? kv_sum / shape.shape.decode_batch() : 0;
        text += fmt::format("{:>3} {:>6.1f}% {:>6.1f}% {:>6} {:>10} {:>9} {:>9.2f}\n", i,
                            shape.weight * 100, shape.step_share * 100, shape.shape.decode_batch(),
                            format_tokens(kv_mean), shape.shape.prefill_tokens(),
                            shape.profile_step_ms);
    }
    text += fmt::format("{} sampled requests to replay\n", workload.requests.size());
    return text;
}

}  // namespace hp::traffic
