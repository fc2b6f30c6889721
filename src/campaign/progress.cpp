#include "hotpass/campaign/progress.h"

#include <fmt/format.h>

#include "hotpass/core/clock.h"

namespace hp::campaign {

namespace {
std::string clock_text(double seconds) {
    const int s = int(seconds);
    return fmt::format("{}:{:02d}", s / 60, s % 60);
}
}  // namespace

std::string format_progress(const ProgressState &s) {
    const std::string budget = s.budget_s > 0 ? "/" + clock_text(s.budget_s) : "";
    const std::string candidates = s.budget_candidates > 0 ? fmt::format("/{}", s.budget_candidates) : "";
    const std::string best = s.best == "baseline" ? "baseline" : fmt::format("{} {:.3f}x", s.best.substr(0, 12), s.best_speedup);
    return fmt::format("{}{} | candidates {}{} built {} (failed {}) verified {} promoted {} queued {} | best {} | executor starts {}",
                       clock_text(s.elapsed_s), budget, s.n_candidate, candidates, s.n_built, s.n_build_failed, s.n_verified, s.n_promoted,
                       s.queued, best, s.executor_starts);
}

Progress::Progress(bool live, int64_t campaign_id, std::function<ProgressState()> state)
    : live_(live), campaign_id_(campaign_id), state_(std::move(state)) {}

void Progress::event(const std::string &line) {
    const ProgressState state = state_();
    std::lock_guard lock(mutex_);
    if (live_ && drawn_) fmt::print(stderr, "\r\033[K");
    fmt::print(stderr, "[campaign {} {:>6}] {}\n", campaign_id_, clock_text(state.elapsed_s), line);
    if (live_) draw_locked(state);
    std::fflush(stderr);
}

void Progress::tick() {
    const double now = now_seconds();
    {
        std::lock_guard lock(mutex_);
        if (now - last_draw_ < (live_ ? 0.25 : 30.0)) return;
    }
    const ProgressState state = state_();
    std::lock_guard lock(mutex_);
    if (live_) {
        draw_locked(state);
    } else {
        fmt::print(stderr, "[campaign {} {:>6}] {}\n", campaign_id_, clock_text(state.elapsed_s), format_progress(state));
    }
    last_draw_ = now;
    std::fflush(stderr);
}

void Progress::draw_locked(const ProgressState &state) {
    fmt::print(stderr, "\r\033[K{}", format_progress(state));
    drawn_ = true;
}

void Progress::finish() {
    const ProgressState state = state_();
    std::lock_guard lock(mutex_);
    if (live_ && drawn_) fmt::print(stderr, "\r\033[K");
    fmt::print(stderr, "[campaign {} {:>6}] {}\n", campaign_id_, clock_text(state.elapsed_s), format_progress(state));
    drawn_ = false;
    std::fflush(stderr);
}

}  // namespace hp::campaign
