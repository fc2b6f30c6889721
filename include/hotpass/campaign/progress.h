// Campaign progress on stderr: on a terminal a live status line (elapsed/budget, candidates
// built/verified/promoted, the current best and its speedup, executor restarts) redrawn in place
// with events printed above it; otherwise plain timestamped log lines, and the status line every
// 30 s. Safe to call from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace hp::campaign {

struct ProgressState {
    double elapsed_s = 0, budget_s = 0;
    int n_candidate = 0, budget_candidates = 0;
    int n_built = 0, n_build_failed = 0, n_verified = 0, n_promoted = 0;
    int queued = 0;
    std::string best = "baseline";
    double best_speedup = 1;
    int executor_starts = 0;
};

std::string format_progress(const ProgressState &state);

class Progress {
public:
    Progress(bool live, int64_t campaign_id, std::function<ProgressState()> state);
    void event(const std::string &line);
    void tick();
    void finish();

private:
    void draw_locked(const ProgressState &state);

    bool live_;
    int64_t campaign_id_;
    std::function<ProgressState()> state_;
    std::mutex mutex_;
    double last_draw_ = 0;
    bool drawn_ = false;
};

}  // namespace hp::campaign
