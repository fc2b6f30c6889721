#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/two_sample.h"

namespace hp::traffic {
namespace {

Distribution uniform_lengths(uint64_t lo, uint64_t hi, uint64_t repeat = 1) {
    ValueCounter counter;
    for (uint64_t v = lo; v < hi; ++v) counter.add(v, repeat);
    return counter.summarize();
}

TEST(TrafficTwoSample, KsIsZeroForIdenticalAndOneForDisjoint) {
    const Distribution a = uniform_lengths(100, 1000);
    EXPECT_EQ(ks_test(a, a).statistic, 0.0);
    EXPECT_EQ(ks_test(a, a).p_value, 1.0);
    const KsResult disjoint = ks_test(a, uniform_lengths(5000, 9000));
    EXPECT_DOUBLE_EQ(disjoint.statistic, 1.0);
    EXPECT_LT(disjoint.p_value, 1e-12);
}

TEST(TrafficTwoSample, KsOnBinsTracksTheExactStatistic) {
    // Uniform [0, 1000) against uniform [0, 2000): exact D = 0.5 (at 1000).
    const KsResult result = ks_test(uniform_lengths(0, 1000, 2), uniform_lengths(0, 2000));
    EXPECT_NEAR(result.statistic, 0.5, 0.05);
}

TEST(TrafficTwoSample, KsPValueMatchesTheKolmogorovCriticalValue) {
    // For large samples, D = 1.3581 / sqrt(n_eff) is the 5% critical value.
    const double n = 1e6, n_eff = n / 2;
    EXPECT_NEAR(ks_p_value(1.3581 / std::sqrt(n_eff), n, n), 0.05, 0.002);
    EXPECT_NEAR(ks_p_value(1.6276 / std::sqrt(n_eff), n, n), 0.01, 0.001);
    EXPECT_EQ(ks_p_value(0, n, n), 1.0);
}

TEST(TrafficTwoSample, PsiSeparatesStableFromShifted) {
    const Distribution reference = uniform_lengths(100, 5000);
    EXPECT_NEAR(population_stability_index(reference, reference), 0.0, 1e-12);
    EXPECT_LT(population_stability_index(reference, uniform_lengths(110, 5100)), 0.1);
    EXPECT_GT(population_stability_index(reference, uniform_lengths(2000, 10000)), 0.25);
}

}  // namespace
}  // namespace hp::traffic
