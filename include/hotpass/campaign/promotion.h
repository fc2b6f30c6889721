// Repeat-before-promote: a candidate becomes the incumbent only when independent slow-tier runs
// (each a fresh ABAB timing against the incumbent in the slow executor) all say `faster`. One
// significant slow-tier win can be noise (a busy neighbour during the candidate's samples); two
// independent ones rarely are. The decision is a pure function of the runs so far.
#pragma once

#include <string>
#include <vector>

namespace hp::campaign {

inline constexpr int kSlowRunsToPromote = 2;

struct SlowRun {
    std::string code;    // the slow-tier verdict code
    double speedup = 0;  // its weighted speedup against the incumbent (0: not measured)
};

enum class SlowTierDecision { run_again, promote, reject };

struct SlowTierOutcome {
    SlowTierDecision decision = SlowTierDecision::run_again;
    double speedup = 0;  // when promoted: the smallest speedup of the runs (the conservative one)
    std::string reason;
};

// run_again while every run so far said `faster` and fewer than `runs_needed` ran; promote when
// `runs_needed` runs all said `faster`; reject as soon as one did not.
SlowTierOutcome decide_slow_tier(const std::vector<SlowRun> &runs, int runs_needed = kSlowRunsToPromote);

}  // namespace hp::campaign
