// Statistics for timings: robust summaries, a rank test and a bootstrap interval. Timings on a
// shared machine are skewed and heavy-tailed, so everything here is median- and rank-based. The
// executor times candidate and incumbent in adjacent pairs (ABAB), so a slow drift of the machine
// (a build starting on the other core, clocks moving) hits both sides of a pair alike: the pairs
// are analysed as pairs, which takes the drift out instead of counting it as noise.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hp::tune {

double median(std::vector<double> values);
double quantile(std::vector<double> values, double q);  // linear interpolation, q in [0, 1]

// Two-sided p-value of the Wilcoxon signed-rank test that paired differences are symmetric about
// zero. Zero differences are dropped (Wilcoxon's rule). Exact up to 50 differences (the null
// distribution of the rank sum given the magnitudes, ties at mid-ranks, counted over the sign
// patterns); beyond that the normal approximation with tie and continuity corrections. The
// smallest p-value n differences can give is 2 / 2^n: 0.0078 at 8, 0.0156 at 7.
double signed_rank_p(const std::vector<double> &differences);

struct Interval {
    double low = 0, high = 0;
};

// How a bootstrap draws: by pairs (index i of both samples together, the first min(sizes) of each),
// two consecutive pairs at a time, or each sample on its own. The executor flips which side goes
// first every repetition, so two consecutive pairs run A B B A: an order effect (the second call of
// a pair finding warm caches) or a drift that is linear over the four calls cancels inside a block,
// where single pairs would carry it with alternating sign into the interval.
enum class Resample { paired, independent };

// Pair indices for one paired draw over n_pair pairs: blocks of two consecutive pairs (the last one
// alone when n_pair is odd), drawn with replacement until there are at least n_pair indices.
std::vector<size_t> resample_pairs(size_t n_pair, std::mt19937_64 &rng);

// Percentile bootstrap interval of median(numerator) / median(denominator), with a fixed seed so a
// report is reproducible.
Interval bootstrap_ratio_of_medians(const std::vector<double> &numerator, const std::vector<double> &denominator,
                                    Resample resample, double confidence = 0.95, int n_resample = 2000, uint64_t seed = 1);

}  // namespace hp::tune
