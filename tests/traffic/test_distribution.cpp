#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/distribution.h"

namespace hp::traffic {
namespace {

TEST(TrafficDistribution, NearestRankQuantilesAndMean) {
    ValueCounter counter;
    for (uint64_t v = 1; v <= 100; ++v) counter.add(v);
    const Distribution d = counter.summarize();
    EXPECT_EQ(d.count, 100u);
    EXPECT_DOUBLE_EQ(d.mean, 50.5);
    EXPECT_EQ(d.p50, 50u);
    EXPECT_EQ(d.p90, 90u);
    EXPECT_EQ(d.p99, 99u);
    EXPECT_EQ(d.min, 1u);
    EXPECT_EQ(d.max, 100u);
    uint64_t binned = 0;
    for (const HistogramBin &bin : d.bins) {
        EXPECT_LT(bin.lo, bin.hi);
        binned += bin.count;
    }
    EXPECT_EQ(binned, 100u);
}

TEST(TrafficDistribution, WeightsCountAsRepeatedSamples) {
    ValueCounter counter;
    counter.add(10, 9);
    counter.add(1000, 1);
    EXPECT_EQ(counter.quantile(0.9), 10u);
    EXPECT_EQ(counter.quantile(0.91), 1000u);
    EXPECT_DOUBLE_EQ(counter.summarize().mean, 109.0);
}

TEST(TrafficDistribution, BinsAreAboutNinePercentWide) {
    const std::vector<uint64_t> &edges = histogram_edges();
    EXPECT_EQ(edges[0], 0u);
    for (size_t i = 1; i + 1 < edges.size(); ++i) {
        EXPECT_LT(edges[i], edges[i + 1]);
        // 2^(1/8) = 1.0905, plus the rounding of the edges up to integers.
        if (edges[i] >= 100) {
            EXPECT_LE(double(edges[i + 1]) / double(edges[i]),
                      std::exp2(1 / 8.0) + 1.0 / double(edges[i]));
        }
    }
    EXPECT_LE(edges[histogram_bin(1000)], 1000u);
    EXPECT_GT(edges[histogram_bin(1000) + 1], 1000u);
}

TEST(TrafficDistribution, MemoryIsBoundedByDistinctValues) {
    ValueCounter counter;
    for (int i = 0; i < 1000000; ++i) counter.add(uint64_t(i % 100));
    const size_t bytes = counter.memory_bytes();
    for (int i = 0; i < 1000000; ++i) counter.add(uint64_t(i % 100));
    EXPECT_EQ(counter.memory_bytes(), bytes);
}

}  // namespace
}  // namespace hp::traffic
