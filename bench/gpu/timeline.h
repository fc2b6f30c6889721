// Where a replayed decode step's time goes, from the start and end time of every kernel in it (the
// records come from CUPTI, cupti_trace.h; this part is plain C++ and unit-tested on the CPU).
//
// In a step of dependent kernels with programmatic launches, kernel i may start before kernel i-1
// ends (it runs up to griddepcontrol.wait early), so durations overlap and do not add up to the
// step. What does add up is how far each kernel pushes the step's end: its *exposed* time,
// max(0, end_i - front), where front is the latest end among the kernels that started before it
// (the first kernel's front is its own start). The exposed times of one replay sum to its span,
// first start to last end; a gap in which no kernel ran counts in the exposed time of the kernel
// after it (its launch came late), and in the summary's gap_ms. Per kind of kernel (name and grid, as --breakdown groups them) the
// summary gives the exposed time per step (mean over replays), the mean duration of one launch,
// and the mean *lead*: how long before the front a launch started (its overlap with the kernels
// before it; negative: a gap in which no kernel of the step ran).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hp::bench_timeline {

struct KernelSpan {
    std::string kind;  // kernel name and grid
    uint64_t start_ns = 0, end_ns = 0;
};

struct KindShare {
    std::string kind;
    int launches = 0;           // per step
    double exposed_ms = 0;      // per step, mean over replays
    double mean_us = 0;         // end - start of one launch, mean
    double mean_lead_us = 0;    // front - start of one launch, mean (> 0: started under its predecessors)
};

struct Summary {
    int replays = 0;
    double span_ms_median = 0, span_ms_mean = 0, span_ms_min = 0, span_ms_max = 0;  // first start to last end
    double gap_ms = 0;  // per step, mean: time in which no kernel of the step ran (sum of negative leads)
    std::vector<KindShare> kinds;  // by exposed time, largest first
};

// One replay's kernels (any order) -> exposed time and lead of each, in start order.
struct Placed {
    const KernelSpan *span;
    double exposed_ns, lead_ns;
};
inline std::vector<Placed> place(const std::vector<KernelSpan> &replay) {
    std::vector<const KernelSpan *> order;
    for (const KernelSpan &k : replay) order.push_back(&k);
    std::stable_sort(order.begin(), order.end(), [](const KernelSpan *a, const KernelSpan *b) {
        return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns < b->end_ns;
    });
    std::vector<Placed> placed;
    if (order.empty()) return placed;
    uint64_t front = order.front()->start_ns;
    for (const KernelSpan *k : order) {
        // In integers first: CUPTI's timestamps are ~1.8e18 ns, where a double's step is 256 ns.
        const double lead = k->start_ns <= front ? double(front - k->start_ns) : -double(k->start_ns - front);
        const double exposed = k->end_ns > front ? double(k->end_ns - front) : 0.0;
        placed.push_back({k, exposed, lead});
        front = std::max(front, k->end_ns);
    }
    return placed;
}

// A kind launched k times a layer (k >= 2: e.g. o_proj and down_proj on one kernel and grid) is split
// into its k places in the layer: the launches of each replay, in start order, are relabelled
// "KIND [j/k]" for occurrence j % k (from 1), so that each place's exposed time shows on its own
// line. A kind whose count per replay is not a multiple k >= 2 of n_layer (once a step, once a
// layer, one layer fewer) keeps its label. n_layer <= 0 leaves every label.
inline void split_by_layer_place(std::vector<std::vector<KernelSpan>> &replays, int n_layer) {
    if (n_layer <= 0) return;
    for (std::vector<KernelSpan> &replay : replays) {
        std::vector<KernelSpan *> order;
        std::map<std::string, int> count;
        for (KernelSpan &k : replay) {
            order.push_back(&k);
            ++count[k.kind];
        }
        std::stable_sort(order.begin(), order.end(), [](const KernelSpan *a, const KernelSpan *b) { return a->start_ns < b->start_ns; });
        std::map<std::string, int> seen;
        for (KernelSpan *k : order) {
            const int n = count[k->kind];
            if (n < 2 * n_layer || n % n_layer != 0) continue;
            const int places = n / n_layer, j = seen[k->kind]++ % places;
            k->kind += " [" + std::to_string(j + 1) + "/" + std::to_string(places) + "]";
        }
    }
}

// Replays with no kernels are ignored; kinds are keyed by KernelSpan::kind.
inline Summary summarize(const std::vector<std::vector<KernelSpan>> &replays) {
    Summary summary;
    struct Sum {
        double exposed_ns = 0, duration_ns = 0, lead_ns = 0;
        long launches = 0;
    };
    std::map<std::string, Sum> sums;
    std::vector<double> spans;
    double gap_ns = 0;
    for (const std::vector<KernelSpan> &replay : replays) {
        const std::vector<Placed> placed = place(replay);
        if (placed.empty()) continue;
        uint64_t first = placed.front().span->start_ns, last = 0;
        for (const Placed &p : placed) {
            Sum &sum = sums[p.span->kind];
            sum.exposed_ns += p.exposed_ns;
            sum.duration_ns += p.span->end_ns > p.span->start_ns ? double(p.span->end_ns - p.span->start_ns) : 0.0;
            sum.lead_ns += p.lead_ns;
            sum.launches += 1;
            if (p.lead_ns < 0) gap_ns -= p.lead_ns;
            last = std::max(last, p.span->end_ns);
        }
        spans.push_back(double(last - first) * 1e-6);
    }
    summary.replays = int(spans.size());
    if (spans.empty()) return summary;
    std::sort(spans.begin(), spans.end());
    summary.span_ms_median = spans[spans.size() / 2];
    summary.span_ms_min = spans.front();
    summary.span_ms_max = spans.back();
    for (double span : spans) summary.span_ms_mean += span / double(spans.size());
    const double n = double(summary.replays);
    summary.gap_ms = gap_ns * 1e-6 / n;
    for (const auto &[kind, sum] : sums) {
        KindShare share;
        share.kind = kind;
        share.launches = int((sum.launches + summary.replays / 2) / summary.replays);
        share.exposed_ms = sum.exposed_ns * 1e-6 / n;
        share.mean_us = sum.duration_ns * 1e-3 / double(sum.launches);
        share.mean_lead_us = sum.lead_ns * 1e-3 / double(sum.launches);
        summary.kinds.push_back(share);
    }
    std::stable_sort(summary.kinds.begin(), summary.kinds.end(), [](const KindShare &a, const KindShare &b) { return a.exposed_ms > b.exposed_ms; });
    return summary;
}

}  // namespace hp::bench_timeline
