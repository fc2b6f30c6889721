// Statistics for timings: robust summaries, a rank test and a bootstrap interval. Timings on a
// shared machine are skewed and heavy-tailed, so everything here is median- and rank-based.
#pragma once

#include <cstdint>
#include <vector>

namespace hp::tune {

double median(std::vector<double> values);
double quantile(std::vector<double> values, double q);  // linear interpolation, q in [0, 1]

// Two-sided p-value of the Mann-Whitney U test (normal approximation with tie correction) that
// samples a and b come from the same distribution.
double mann_whitney_p(const std::vector<double> &a, const std::vector<double> &b);

struct Interval {
    double low = 0, high = 0;
};

// Percentile bootstrap interval of median(numerator) / median(denominator), resampling each
// independently, with a fixed seed so a report is reproducible.
Interval bootstrap_ratio_of_medians(const std::vector<double> &numerator, const std::vector<double> &denominator,
                                    double confidence = 0.95, int n_resample = 2000, uint64_t seed = 1);

}  // namespace hp::tune
