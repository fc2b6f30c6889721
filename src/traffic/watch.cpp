// The rolling watch: one ProfileBuilder per window, compared on close.
#include "hotpass/traffic/watch.h"

#include <cmath>

namespace hp::traffic {

DriftWatcher::DriftWatcher(const WatchOptions &options) : options_(options) {
    HP_CHECK(options.window_s > 0 && std::isfinite(options.window_s),
             "window must be finite and positive, got {}", options.window_s);
    builder_.emplace(options_.profile);
}

WatchWindow DriftWatcher::close_window() {
    WatchWindow window;
    window.start_s = double(window_index_) * options_.window_s;
    window.end_s = double(window_index_ + 1) * options_.window_s;
    window.requests = window_requests_;
    Profile profile = builder_->finish(
        fmt::format("window {:.0f}-{:.0f} s", window.start_s, window.end_s), "window");
    builder_.emplace(options_.profile);
    window_requests_ = 0;
    if (profile.requests < options_.thresholds.min_requests) {
        window.report.enough_data = false;
        window.report.reason = fmt::format("no decision: {} requests (need {})", profile.requests,
                                           options_.thresholds.min_requests);
        return window;
    }
    if (!reference_) {
        window.reference = true;
        window.report.reason = "first window: the reference";
        reference_ = std::move(profile);
        return window;
    }
    window.report = compare_profiles(*reference_, profile, options_.thresholds);
    if (window.report.drift) {
        window.retune = true;
        window.reference = true;
        reference_ = std::move(profile);
    }
    return window;
}

std::vector<WatchWindow> DriftWatcher::add(const Request &request) {
    const double index = std::floor(request.arrival_s / options_.window_s);
    HP_CHECK(index < double(kMaxWatchWindows),
             "arrival {} s is in window {}, past kMaxWatchWindows (watch_trace refuses it)",
             request.arrival_s, index);
    std::vector<WatchWindow> closed;
    while (double(window_index_) < index) {
        closed.push_back(close_window());
        ++window_index_;
    }
    builder_->add(request);
    ++window_requests_;
    return closed;
}

std::vector<WatchWindow> DriftWatcher::finish() {
    if (window_requests_ == 0) return {};
    return {close_window()};
}

namespace {

// The error for a trace that `window_s` cuts into too many windows; reads the rest of the trace to
// say how long it is and which window would fit.
Error too_many_windows(TraceReader &reader, double window_s, double arrival_s) {
    Request request;
    for (;;) {
        Result<bool> got = reader.next(request);
        if (!got.ok() || !*got) break;
        arrival_s = request.arrival_s;
    }
    const double windows = std::floor(arrival_s / window_s) + 1;
    const double shortest_s = arrival_s / double(kMaxWatchWindows - 1) * 1.01;
    return error(
        "a {:.3g} s window cuts {} ({:.1f} s of arrivals) into {:.3g} windows, more than {}; use "
        "a window of at least {:.3g} s",
        window_s, reader.path().string(), arrival_s, windows, kMaxWatchWindows, shortest_s);
}

}  // namespace

Result<WatchResult> watch_trace(const std::filesystem::path &path,
                                std::optional<TraceFormat> format,
                                const ReaderOptions &reader_options, const WatchOptions &options) {
    if (!(options.window_s > 0 && std::isfinite(options.window_s)))
        return error("window must be a finite number of seconds > 0, got {}", options.window_s);
    Result<std::unique_ptr<TraceReader>> reader = open_trace(path, format, reader_options);
    HP_TRY(reader);
    DriftWatcher watcher(options);
    WatchResult result;
    Request request;
    const auto keep = [&](std::vector<WatchWindow> windows) {
        for (WatchWindow &window : windows) {
            result.retunes += window.retune;
            result.windows.push_back(std::move(window));
        }
    };
    for (;;) {
        Result<bool> got = (*reader)->next(request);
        HP_TRY(got);
        if (!*got) break;
        if (!(request.arrival_s / options.window_s < double(kMaxWatchWindows)))
            return too_many_windows(**reader, options.window_s, request.arrival_s);
        keep(watcher.add(request));
    }
    HP_TRY(require_requests(**reader));
    keep(watcher.finish());
    result.stats = (*reader)->stats();
    return result;
}

}  // namespace hp::traffic
