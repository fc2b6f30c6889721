// Rolling drift watch over a trace: cut it into consecutive windows of window_s seconds, profile
// each, and compare it with the reference — the window the forward pass was last tuned for (at
// first, the first full window). A window that drifts is a re-tune point and becomes the new
// reference. Windows with fewer than thresholds.min_requests requests are reported, not compared.
// Window k is [k * window_s, (k + 1) * window_s) of trace-relative time; a trace is cut into at
// most kMaxWatchWindows windows (each is kept and printed), so a tiny window is an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/drift.h"
#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

inline constexpr uint64_t kMaxWatchWindows = 100'000;

struct WatchOptions {
    double window_s = 600;
    DriftThresholds thresholds;
    ProfileOptions profile = [] {
        ProfileOptions options;
        options.simulate = false;  // drift does not use the batching simulation
        options.sample_requests = 0;
        return options;
    }();
};

struct WatchWindow {
    double start_s = 0, end_s = 0;  // [start_s, end_s), trace-relative
    uint64_t requests = 0;
    bool reference = false;  // became the reference (first window or a re-tune point)
    bool retune = false;     // drifted from the reference: a re-tune point
    DriftReport report;      // empty for the first window and for too-small windows
};

class DriftWatcher {
  public:
    // options.window_s must be finite and > 0.
    explicit DriftWatcher(const WatchOptions &options);
    // Requests in arrival order, in window index < kMaxWatchWindows; returns the windows that
    // closed because of this arrival.
    std::vector<WatchWindow> add(const Request &request);
    std::vector<WatchWindow> finish();  // closes the last (partial) window

  private:
    WatchWindow close_window();  // closes window window_index_

    WatchOptions options_;
    std::optional<ProfileBuilder> builder_;
    uint64_t window_index_ = 0;
    uint64_t window_requests_ = 0;
    std::optional<Profile> reference_;
};

struct WatchResult {
    std::vector<WatchWindow> windows;
    uint64_t retunes = 0;
    ReadStats stats;
};

// Errors: a window_s that is not finite and > 0, a trace that the window cuts into more than
// kMaxWatchWindows windows (the message gives the shortest window that fits), the reader's errors,
// or no valid request (require_requests).
Result<WatchResult> watch_trace(const std::filesystem::path &path,
                                std::optional<TraceFormat> format,
                                const ReaderOptions &reader_options, const WatchOptions &options);

}  // namespace hp::traffic
