#include "hotpass/tune/stats.h"

#include <gtest/gtest.h>

#include <random>

namespace hp::tune {
namespace {

TEST(Stats, QuantilesInterpolate) {
    EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
    EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
    EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4, 5}, 0.25), 2);
    EXPECT_DOUBLE_EQ(quantile({10}, 0.9), 10);
}

TEST(Stats, MannWhitneyMatchesScipy) {
    // scipy.stats.mannwhitneyu([1..5], [6..10], use_continuity=True, method="asymptotic").pvalue
    EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 0.012185, 1e-5);
    // Ties, by hand: mid-ranks of a = 1, 3, 3, 6 -> U = 13 - 10 = 3, mean 8; tie groups of 3 and 3
    // -> var = 16/12 * (9 - 48/56) = 10.857; z = (5 - 0.5) / 3.295 = 1.3657; p = erfc(z/sqrt 2).
    EXPECT_NEAR(mann_whitney_p({1, 2, 2, 3}, {2, 3, 3, 4}), 0.17203, 1e-4);
    EXPECT_NEAR(mann_whitney_p({1, 1, 1}, {1, 1, 1}), 1.0, 1e-12);
}

TEST(Stats, RankTestFalsePositiveRateIsAboutAlpha) {
    std::mt19937_64 rng(3);
    std::lognormal_distribution<double> timing(0.0, 0.3);
    int rejections = 0;
    const int trials = 400;
    for (int t = 0; t < trials; ++t) {
        std::vector<double> a(40), b(40);
        for (double &x : a) x = timing(rng);
        for (double &x : b) x = timing(rng);
        rejections += mann_whitney_p(a, b) < 0.05;
    }
    EXPECT_LT(rejections, trials * 0.09);  // alpha 0.05, plus sampling slack
    EXPECT_GT(rejections, trials * 0.01);
}

TEST(Stats, BootstrapIntervalCoversTheTrueRatio) {
    std::mt19937_64 rng(5);
    std::lognormal_distribution<double> timing(0.0, 0.1);
    std::vector<double> slow(60), fast(60);
    for (double &x : slow) x = 1.2 * timing(rng);
    for (double &x : fast) x = timing(rng);
    const Interval interval = bootstrap_ratio_of_medians(slow, fast);
    EXPECT_LT(interval.low, 1.2);
    EXPECT_GT(interval.high, 1.2);
    EXPECT_GT(interval.low, 1.0);  // a 20% difference with 10% noise is clearly resolved
}

}  // namespace
}  // namespace hp::tune
