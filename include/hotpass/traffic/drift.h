// Drift: does a recent window of traffic differ from the one the current forward pass was tuned
// for enough to re-tune? Each statistic is compared with its threshold; ratio = value/threshold;
// the score is the largest ratio; the decision is "drift" when any statistic triggers (ratio >= 1;
// a KS statistic triggers only when also significant, p < ks_alpha). The reason names the
// statistics that triggered, largest first, e.g. "P90 input 2.7k → 5.2k tokens (+90%), KS 0.41".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpass/traffic/profile.h"

namespace hp::traffic {

struct DriftThresholds {
    double ks = 0.15;                       // KS D on input or output lengths
    double ks_alpha = 0.001;                // ... and its p-value must be below this
    double psi = 0.25;                      // PSI on input or output lengths ("major shift")
    double p90_change = 0.30;               // |P90 recent / P90 reference - 1|
    double prefix_reuse_change = 0.15;      // |reuse recent - reuse reference| (absolute share)
    double rate_change = 0.50;              // max(r/r0, r0/r) - 1: x1.5 or /1.5
    double expert_imbalance_change = 0.25;  // relative change of mean max/mean expert load
    double expert_load_distance = 0.10;     // mean total-variation distance of expert shares
    uint64_t min_requests = 200;            // fewer on either side: no decision
};

struct DriftStatistic {
    std::string name;  // "ks_input", "psi_output", "p90_input", "prefix_reuse", "rate", ...
    double value = 0;  // the statistic
    double threshold = 0;
    double ratio = 0;  // value / threshold (KS: capped below 1 when not significant)
    bool triggered = false;
    std::string detail;  // human text, e.g. "P90 input 2.7k → 5.2k tokens (+90%)"
};

struct DriftReport {
    std::vector<DriftStatistic> statistics;
    double score = 0;  // max ratio; >= 1 means drift
    bool drift = false;
    bool enough_data = true;
    std::string reason;
};

DriftReport compare_profiles(const Profile &reference, const Profile &recent,
                             const DriftThresholds &thresholds = {});

std::string drift_report_to_json(const DriftReport &report, int indent = 2);
std::string format_drift_report(const DriftReport &report);  // a readable table + decision

}  // namespace hp::traffic
