// The rolling watch: one ProfileBuilder per window, compared on close.
#include "hotpass/traffic/watch.h"

#include <cmath>

namespace hp::traffic {

DriftWatcher::DriftWatcher(const WatchOptions &options) : options_(options) {
    HP_CHECK(options.window_s > 0, "window must be positive");
    builder_.emplace(options_.profile);
}

WatchWindow DriftWatcher::close_window(double end_s) {
    WatchWindow window;
    window.start_s = window_start_s_;
    window.end_s = end_s;
    window.requests = window_requests_;
    Profile profile =
        builder_->finish(fmt::format("window {:.0f}-{:.0f} s", window_start_s_, end_s), "window");
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
    std::vector<WatchWindow> closed;
    while (request.arrival_s >= window_start_s_ + options_.window_s) {
        closed.push_back(close_window(window_start_s_ + options_.window_s));
        window_start_s_ += options_.window_s;
    }
    builder_->add(request);
    ++window_requests_;
    return closed;
}

std::vector<WatchWindow> DriftWatcher::finish() {
    if (window_requests_ == 0) return {};
    return {close_window(window_start_s_ + options_.window_s)};
}

Result<WatchResult> watch_trace(const std::filesystem::path &path,
                                std::optional<TraceFormat> format,
                                const ReaderOptions &reader_options, const WatchOptions &options) {
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
        keep(watcher.add(request));
    }
    keep(watcher.finish());
    result.stats = (*reader)->stats();
    return result;
}

}  // namespace hp::traffic
