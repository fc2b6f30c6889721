// bench/gpu/timeline.h: exposed time, lead and gaps of a replayed step's kernels.
#include "timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace hp::bench_timeline {
namespace {

// The kind's share; a kind the summary lacks fails the test (and returns an empty share).
KindShare find(const Summary &summary, const std::string &kind) {
    for (const KindShare &k : summary.kinds) {
        if (k.kind == kind) return k;
    }
    ADD_FAILURE() << "no kind " << kind;
    return {};
}

TEST(Timeline, SerialChainWithAGap) {
    // a [0, 10) us, then 2 us with nothing running, b [12, 20), c [20, 25).
    const Summary s = summarize({{{"a", 0, 10000}, {"b", 12000, 20000}, {"c", 20000, 25000}}});
    ASSERT_EQ(s.replays, 1);
    EXPECT_DOUBLE_EQ(s.span_ms_median, 0.025);
    EXPECT_DOUBLE_EQ(s.gap_ms, 0.002);
    ASSERT_EQ(s.kinds.size(), 3u);
    EXPECT_EQ(s.kinds[0].kind, "a");  // largest exposed time first
    EXPECT_DOUBLE_EQ(find(s, "a").exposed_ms, 0.010);
    EXPECT_DOUBLE_EQ(find(s, "b").exposed_ms, 0.010);  // the gap before it included
    EXPECT_DOUBLE_EQ(find(s, "b").mean_lead_us, -2.0);
    EXPECT_DOUBLE_EQ(find(s, "c").exposed_ms, 0.005);
    EXPECT_DOUBLE_EQ(find(s, "c").mean_lead_us, 0.0);
}

TEST(Timeline, EarlyStartsCountOnlyWhatExtendsTheStep) {
    // b starts 6 us under a (programmatic launch) and ends 5 us after it; c lies inside b; d starts
    // 1 us before b ends. Input out of order.
    const Summary s = summarize({{{"d", 14000, 17000}, {"b", 4000, 15000}, {"a", 0, 10000}, {"c", 5000, 9000}}});
    EXPECT_DOUBLE_EQ(s.span_ms_median, 0.017);
    EXPECT_DOUBLE_EQ(s.gap_ms, 0.0);
    EXPECT_DOUBLE_EQ(find(s, "b").exposed_ms, 0.005);
    EXPECT_DOUBLE_EQ(find(s, "b").mean_lead_us, 6.0);
    EXPECT_DOUBLE_EQ(find(s, "b").mean_us, 11.0);
    EXPECT_DOUBLE_EQ(find(s, "c").exposed_ms, 0.0);
    EXPECT_DOUBLE_EQ(find(s, "c").mean_lead_us, 10.0);  // front 15 (b's end) against its start 5
    EXPECT_DOUBLE_EQ(find(s, "d").exposed_ms, 0.002);
    EXPECT_DOUBLE_EQ(find(s, "d").mean_lead_us, 1.0);
}

TEST(Timeline, KindsAveragedOverReplaysAndLaunches) {
    // Two launches of "g" per step; the second replay is slower; an empty replay is ignored.
    const std::vector<std::vector<KernelSpan>> replays = {
        {{"g", 100000, 104000}, {"h", 104000, 105000}, {"g", 105000, 109000}},
        {},
        {{"g", 500000, 506000}, {"h", 506000, 507000}, {"g", 507000, 513000}},
    };
    const Summary s = summarize(replays);
    ASSERT_EQ(s.replays, 2);
    EXPECT_DOUBLE_EQ(s.span_ms_min, 0.009);
    EXPECT_DOUBLE_EQ(s.span_ms_max, 0.013);
    EXPECT_DOUBLE_EQ(s.span_ms_mean, 0.011);
    EXPECT_EQ(find(s, "g").launches, 2);
    EXPECT_DOUBLE_EQ(find(s, "g").exposed_ms, 0.010);  // (8 + 12) / 2 us
    EXPECT_DOUBLE_EQ(find(s, "g").mean_us, 5.0);
    EXPECT_EQ(find(s, "h").launches, 1);
}

TEST(Timeline, LeadsExactAtCuptiTimestampMagnitudes) {
    // CUPTI's timestamps are ~1.8e18 ns (CLOCK_REALTIME): one ns of lead must survive.
    const uint64_t base = 1764556800000000000ull;
    const Summary s = summarize({{{"a", base, base + 10001}, {"b", base + 10000, base + 20000}, {"c", base + 20003, base + 20004}}});
    EXPECT_DOUBLE_EQ(find(s, "b").mean_lead_us, 0.001);
    EXPECT_DOUBLE_EQ(find(s, "c").mean_lead_us, -0.003);
    EXPECT_DOUBLE_EQ(s.gap_ms, 3e-6);
    EXPECT_DOUBLE_EQ(s.span_ms_median, 0.020004);
}

TEST(Timeline, ExposedTimesSumToTheSpanOfRandomSteps) {
    std::mt19937_64 rng(20261201);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<KernelSpan> replay;
        uint64_t t = 1000000;
        const int n = 1 + int(rng() % 40);
        for (int i = 0; i < n; ++i) {
            const uint64_t start = t + rng() % 3000 - std::min<uint64_t>(t - 1000000, rng() % 4000);  // gaps and early starts
            const uint64_t end = start + 1 + rng() % 9000;
            replay.push_back({"k" + std::to_string(rng() % 5), start, end});
            t = std::max(t, end);
        }
        uint64_t first = UINT64_MAX, last = 0;
        for (const KernelSpan &k : replay) first = std::min(first, k.start_ns), last = std::max(last, k.end_ns);
        const Summary s = summarize({replay});
        double exposed = 0;
        for (const KindShare &k : s.kinds) {
            exposed += k.exposed_ms;
            EXPECT_GE(k.exposed_ms, 0.0);
        }
        ASSERT_NEAR(exposed, double(last - first) * 1e-6, 1e-9) << "trial " << trial;
        EXPECT_DOUBLE_EQ(s.span_ms_median, double(last - first) * 1e-6);
        // The gaps are the span less the time some kernel ran (the union of the intervals).
        std::vector<KernelSpan> sorted = replay;
        std::sort(sorted.begin(), sorted.end(), [](const KernelSpan &a, const KernelSpan &b) { return a.start_ns < b.start_ns; });
        uint64_t covered = 0, run_start = sorted.front().start_ns, run_end = sorted.front().end_ns;
        for (const KernelSpan &k : sorted) {
            if (k.start_ns > run_end) {
                covered += run_end - run_start;
                run_start = k.start_ns;
            }
            run_end = std::max(run_end, k.end_ns);
        }
        covered += run_end - run_start;
        EXPECT_NEAR(s.gap_ms, double(last - first - covered) * 1e-6, 1e-9) << "trial " << trial;
    }
}

TEST(Timeline, NoReplaysNoKinds) {
    const Summary s = summarize({});
    EXPECT_EQ(s.replays, 0);
    EXPECT_TRUE(s.kinds.empty());
}

TEST(Timeline, KindsLaunchedSeveralTimesALayerAreSplitByPlace) {
    // Two layers of: x (o_proj), a, x (down_proj); once a step: h (the head). x is launched twice
    // a layer, so its two places get their own lines; a (once a layer) and h keep their labels.
    std::vector<std::vector<KernelSpan>> replays = {{
        {"h", 40000, 50000},  // out of order on purpose
        {"x", 0, 2000}, {"a", 2000, 3000}, {"x", 3000, 7000},
        {"x", 7000, 9000}, {"a", 9000, 10000}, {"x", 10000, 14000},
    }};
    split_by_layer_place(replays, 2);
    const Summary s = summarize(replays);
    ASSERT_EQ(s.kinds.size(), 4u);
    EXPECT_EQ(find(s, "x [1/2]").launches, 2);
    EXPECT_DOUBLE_EQ(find(s, "x [1/2]").exposed_ms, 0.004);
    EXPECT_DOUBLE_EQ(find(s, "x [2/2]").exposed_ms, 0.008);
    EXPECT_EQ(find(s, "a").launches, 2);
    EXPECT_EQ(find(s, "h").launches, 1);

    // Not a multiple of the layers (or no layer count given): labels stay.
    std::vector<std::vector<KernelSpan>> odd = {{{"y", 0, 1000}, {"y", 1000, 2000}, {"y", 2000, 3000}}};
    split_by_layer_place(odd, 2);
    EXPECT_EQ(odd[0][0].kind, "y");
    split_by_layer_place(replays, 0);
    EXPECT_EQ(find(summarize(replays), "x [1/2]").launches, 2);
}

}  // namespace
}  // namespace hp::bench_timeline
