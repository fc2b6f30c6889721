#include "hotpass/campaign/promotion.h"

#include <fmt/format.h>

#include <algorithm>

namespace hp::campaign {

SlowTierOutcome decide_slow_tier(const std::vector<SlowRun> &runs, int runs_needed) {
    SlowTierOutcome outcome;
    std::vector<std::string> figures;
    for (size_t i = 0; i < runs.size(); ++i) {
        figures.push_back(fmt::format("{} {:.3f}x", runs[i].code, runs[i].speedup));
        if (runs[i].code != "faster") {
            outcome.decision = SlowTierDecision::reject;
            outcome.reason = fmt::format("slow-tier run {} of {} said {} ({})", i + 1, runs_needed, runs[i].code, fmt::join(figures, ", "));
            return outcome;
        }
    }
    if (int(runs.size()) < std::max(1, runs_needed)) {
        outcome.reason = runs.empty() ? "no slow-tier run yet"
                                      : fmt::format("{} of {} slow-tier runs faster ({}); repeating", runs.size(), runs_needed, fmt::join(figures, ", "));
        return outcome;
    }
    outcome.decision = SlowTierDecision::promote;
    outcome.speedup = std::min_element(runs.begin(), runs.end(), [](const SlowRun &a, const SlowRun &b) { return a.speedup < b.speedup; })->speedup;
    outcome.reason = fmt::format("{} independent slow-tier runs faster ({})", runs.size(), fmt::join(figures, ", "));
    return outcome;
}

}  // namespace hp::campaign
