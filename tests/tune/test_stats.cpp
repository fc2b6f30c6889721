#include "hotpass/tune/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace hp::tune {
namespace {

TEST(Stats, QuantilesInterpolate) {
    EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
    EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
    EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4, 5}, 0.25), 2);
    EXPECT_DOUBLE_EQ(quantile({10}, 0.9), 10);
}

TEST(Stats, SignedRankIsExactForSmallSamples) {
    // All n differences one way: p = 2 / 2^n, so 8 pairs can reach alpha = 0.01 and 7 cannot
    // (kMinRepCapped rests on this).
    EXPECT_DOUBLE_EQ(signed_rank_p({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}), 2.0 / 256);
    EXPECT_DOUBLE_EQ(signed_rank_p({-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7}), 2.0 / 128);
    // d = 1, -2, 3, 4, 5: W+ = 13 of 15, W- = 2; the subsets of {1..5} summing to <= 2 are {}, {1},
    // {2}: p = 2 * 3/32.
    EXPECT_DOUBLE_EQ(signed_rank_p({1, -2, 3, 4, 5}), 0.1875);
    // Counted by enumerating all 2^12 sign patterns (Python, itertools.product).
    EXPECT_NEAR(signed_rank_p({0.5, -0.1, 0.3, 0.2, -0.4, 0.6, 0.7, 0.05, -0.8, 0.9, 1.0, 1.1}), 0.0771484375, 1e-12);
    // Zero differences carry no sign and are dropped.
    EXPECT_DOUBLE_EQ(signed_rank_p({0, 0, 1, -2, 3, 4, 5}), 0.1875);
    EXPECT_DOUBLE_EQ(signed_rank_p({0, 0, 0}), 1.0);
    EXPECT_DOUBLE_EQ(signed_rank_p({}), 1.0);
}

TEST(Stats, SignedRankWithTiesIsExactToo) {
    // Eight equal differences (quantised timings tie): mid-rank 4.5 each, and all eight positive
    // is 1 of the 2^8 sign patterns, so p = 2/256 as without ties. The normal approximation would
    // give 0.014 here, and a capped shape of 8 pairs could never reach 0.01.
    EXPECT_DOUBLE_EQ(signed_rank_p(std::vector<double>(8, 0.3)), 2.0 / 256);
    // d = 1, 1, -2, 3: mid-ranks 1.5, 1.5, 3, 4; W+ = 7 of 10, W- = 3. Sign patterns with a rank
    // sum <= 3: {} 0, {1.5} x2, {3}, {1.5, 1.5} 3 -> 5 of 16; p = 2 * 5/16.
    EXPECT_DOUBLE_EQ(signed_rank_p({1, 1, -2, 3}), 0.625);
}

TEST(Stats, SignedRankUsesTheCorrectedNormalApproximationAbove50) {
    // Sixty equal differences: mid-rank 30.5 each, W+ = 1830, mean 915, variance 60*61*121/24 -
    // (60^3 - 60)/48 = 18452.5 - 4498.75 = 13953.75; z = (915 - 0.5) / sqrt(13953.75) = 7.7416.
    EXPECT_NEAR(signed_rank_p(std::vector<double>(60, 0.3)), std::erfc(914.5 / std::sqrt(13953.75) / std::sqrt(2.0)), 1e-20);
}

TEST(Stats, SignedRankFalsePositiveRateIsAboutAlpha) {
    std::mt19937_64 rng(3);
    std::normal_distribution<double> noise(0.0, 0.3);
    int rejections = 0;
    const int trials = 400;
    for (int t = 0; t < trials; ++t) {
        std::vector<double> differences(40);
        for (double &d : differences) d = noise(rng);
        rejections += signed_rank_p(differences) < 0.05;
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
    for (const Resample resample : {Resample::paired, Resample::independent}) {
        const Interval interval = bootstrap_ratio_of_medians(slow, fast, resample);
        EXPECT_LT(interval.low, 1.2);
        EXPECT_GT(interval.high, 1.2);
        EXPECT_GT(interval.low, 1.0);  // a 20% difference with 10% noise is clearly resolved
    }
}

// What pairing is for: the machine drifts (a build on the other core comes and goes), moving both
// halves of each ABAB pair alike. Independent resampling counts the drift as noise and cannot
// resolve a 3% difference; pairs take it out, and the interval still covers the truth.
TEST(Stats, PairsResolveADifferenceThatDriftHidesFromIndependentSamples) {
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> drift(0.0, 0.3), own(0.0, 0.01);
    std::vector<double> incumbent(30), candidate(30), log_ratios;
    for (size_t i = 0; i < incumbent.size(); ++i) {
        const double machine = drift(rng);
        incumbent[i] = 1.03 * machine * own(rng);
        candidate[i] = machine * own(rng);
        log_ratios.push_back(std::log(incumbent[i] / candidate[i]));
    }
    const Interval paired = bootstrap_ratio_of_medians(incumbent, candidate, Resample::paired);
    const Interval independent = bootstrap_ratio_of_medians(incumbent, candidate, Resample::independent);
    EXPECT_LT(paired.low, 1.03);
    EXPECT_GT(paired.high, 1.03);
    EXPECT_GT(paired.low, 1.0);
    EXPECT_LT(independent.low, 1.0) << "the drift was meant to hide the difference from independent resampling";
    EXPECT_LT(paired.high - paired.low, (independent.high - independent.low) / 4);
    EXPECT_LT(signed_rank_p(log_ratios), 0.01);
}

TEST(Stats, PairedDrawsTakeTwoConsecutivePairsAtATime) {
    std::mt19937_64 rng(1);
    for (const size_t n_pair : {1u, 2u, 7u, 20u}) {
        const std::vector<size_t> picks = resample_pairs(n_pair, rng);
        EXPECT_GE(picks.size(), n_pair);
        EXPECT_LE(picks.size(), n_pair + 1);
        for (size_t i = 0; i < picks.size();) {
            ASSERT_EQ(picks[i] % 2, 0u) << "a block starts on an even pair";
            const bool whole = picks[i] + 1 < n_pair;
            if (whole) EXPECT_EQ(picks[i + 1], picks[i] + 1);
            i += whole ? 2 : 1;
        }
    }
}

// The executor flips which side goes first every repetition. When the second call of a pair is
// faster (warm caches), single pairs carry that with alternating sign; ABBA blocks cancel it, so
// the interval of two equal sides stays as narrow as independent resampling's.
TEST(Stats, BlocksOfPairsCancelAnOrderEffect) {
    std::mt19937_64 rng(9);
    std::lognormal_distribution<double> own(0.0, 0.005);
    std::vector<double> incumbent, candidate;
    for (int rep = 0; rep < 40; ++rep) {
        const bool candidate_first = rep % 2 == 0;
        candidate.push_back((candidate_first ? 1.0 : 0.95) * own(rng));
        incumbent.push_back((candidate_first ? 0.95 : 1.0) * own(rng));
    }
    const Interval paired = bootstrap_ratio_of_medians(incumbent, candidate, Resample::paired);
    const Interval independent = bootstrap_ratio_of_medians(incumbent, candidate, Resample::independent);
    EXPECT_LT(paired.low, 1.0);
    EXPECT_GT(paired.high, 1.0);
    EXPECT_LE(paired.high - paired.low, independent.high - independent.low);
}

}  // namespace
}  // namespace hp::tune
