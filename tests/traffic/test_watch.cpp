#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hp::traffic
