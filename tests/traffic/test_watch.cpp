#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "hotpass/traffic/synth.h"
#include "hotpass/traffic/watch.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

std::filesystem::path write_synth(const testing::TempDir &dir, const SynthOptions &options) {
    const auto path = dir.path() / "synth.jsonl";
    std::ofstream out(path);
    Status done =
        synthesize(options, [&](const Request &r) { out << request_to_jsonl(r) << "\n"; });
    EXPECT_TRUE(done.ok());
    return path;
}

TEST(TrafficWatch, RetunesOnceAtTheDriftPoint) {
    testing::TempDir dir;
    SynthOptions options;
    options.duration_s = 3600;
    options.drift = SynthDrift{2.0, ""};
    options.drift_at_s = 1800;
    WatchOptions watch;
    watch.window_s = 600;
    Result<WatchResult> result = watch_trace(write_synth(dir, options), std::nullopt, {}, watch);
    ASSERT_TRUE(result.ok()) << result.error();
    ASSERT_EQ(result->windows.size(), 6u);
    EXPECT_EQ(result->retunes, 1u);
    EXPECT_TRUE(result->windows[0].reference);
    EXPECT_TRUE(result->windows[3].retune) << result->windows[3].report.reason;
    EXPECT_DOUBLE_EQ(result->windows[3].start_s, 1800);
    EXPECT_FALSE(result->windows[4].retune) << result->windows[4].report.reason;
}

TEST(TrafficWatch, StationaryTrafficNeverRetunes) {
    testing::TempDir dir;
    SynthOptions options;
    options.duration_s = 3600;
    options.seed = 7;
    WatchOptions watch;
    watch.window_s = 600;
    Result<WatchResult> result = watch_trace(write_synth(dir, options), std::nullopt, {}, watch);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->retunes, 0u);
    for (const WatchWindow &window : result->windows)
        EXPECT_FALSE(window.retune) << window.report.reason;
}

TEST(TrafficWatch, SmallWindowsMakeNoDecision) {
    testing::TempDir dir;
    SynthOptions options;
    options.duration_s = 600;
    WatchOptions watch;
    watch.window_s = 10;  // ~55 requests per window, below min_requests
    Result<WatchResult> result = watch_trace(write_synth(dir, options), std::nullopt, {}, watch);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->retunes, 0u);
    EXPECT_FALSE(result->windows[1].report.enough_data);
}

// A window must be finite and cut the trace into at most kMaxWatchWindows windows; the error for a
// tiny one names the shortest window that fits.
TEST(TrafficWatch, BadOrTinyWindowsAreErrors) {
    testing::TempDir dir;
    SynthOptions options;
    options.duration_s = 600;
    const auto trace = write_synth(dir, options);
    WatchOptions watch;
    for (const double window_s : {std::nan(""), HUGE_VAL, 0.0, -1.0}) {
        watch.window_s = window_s;
        EXPECT_FALSE(watch_trace(trace, std::nullopt, {}, watch).ok()) << window_s;
    }
    watch.window_s = 1e-6;
    Result<WatchResult> result = watch_trace(trace, std::nullopt, {}, watch);
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.error().find("more than 100000; use a window of at least 0.006"),
              std::string::npos)
        << result.error();
    watch.window_s = 0.0061;
    EXPECT_TRUE(watch_trace(trace, std::nullopt, {}, watch).ok());
}

TEST(TrafficWatch, TraceWithNoValidRowIsAnError) {
    testing::TempDir dir;
    const auto bad = dir.write("bad.jsonl", "{\"arrival_s\": 1, \"input_tokens\": \"x\"}\n");
    Result<WatchResult> result = watch_trace(bad, std::nullopt, {}, WatchOptions{});
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.error().find("no valid request"), std::string::npos) << result.error();
}

}  // namespace
}  // namespace hp::traffic
