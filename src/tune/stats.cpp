#include "hotpass/tune/stats.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "hotpass/core/check.h"

namespace hp::tune {

double quantile(std::vector<double> values, double q) {
    HP_CHECK(!values.empty(), "quantile of no values");
    std::sort(values.begin(), values.end());
    const double position = q * double(values.size() - 1);
    const size_t below = size_t(std::floor(position));
    const size_t above = std::min(below + 1, values.size() - 1);
    const double fraction = position - double(below);
    return values[below] * (1 - fraction) + values[above] * fraction;
}

double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

double mann_whitney_p(const std::vector<double> &a, const std::vector<double> &b) {
    const size_t n_a = a.size(), n_b = b.size();
    if (n_a == 0 || n_b == 0) return 1.0;
    struct Item {
        double value;
        bool from_a;
    };
    std::vector<Item> items;
    for (double x : a) items.push_back({x, true});
    for (double x : b) items.push_back({x, false});
    std::sort(items.begin(), items.end(), [](const Item &x, const Item &y) { return x.value < y.value; });
    // Mid-ranks for ties, and the tie correction term sum(t^3 - t).
    double rank_sum_a = 0, tie_term = 0;
    for (size_t i = 0; i < items.size();) {
        size_t j = i;
        while (j < items.size() && items[j].value == items[i].value) ++j;
        const double mid_rank = (double(i + 1) + double(j)) / 2.0;
        for (size_t k = i; k < j; ++k) {
            if (items[k].from_a) rank_sum_a += mid_rank;
        }
        const double t = double(j - i);
        tie_term += t * t * t - t;
        i = j;
    }
    const double n = double(n_a + n_b);
    const double u = rank_sum_a - double(n_a) * double(n_a + 1) / 2.0;
    const double mean = double(n_a) * double(n_b) / 2.0;
    const double variance = double(n_a) * double(n_b) / 12.0 * ((n + 1) - tie_term / (n * (n - 1)));
    if (variance <= 0) return 1.0;
    const double z = (std::fabs(u - mean) - 0.5) / std::sqrt(variance);  // continuity correction
    return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

Interval bootstrap_ratio_of_medians(const std::vector<double> &numerator, const std::vector<double> &denominator,
                                    double confidence, int n_resample, uint64_t seed) {
    HP_CHECK(!numerator.empty() && !denominator.empty(), "bootstrap of empty samples");
    std::mt19937_64 rng(seed);
    std::vector<double> ratios, x(numerator.size()), y(denominator.size());
    ratios.reserve(size_t(n_resample));
    for (int r = 0; r < n_resample; ++r) {
        for (double &value : x) value = numerator[rng() % numerator.size()];
        for (double &value : y) value = denominator[rng() % denominator.size()];
        ratios.push_back(median(x) / median(y));
    }
    const double tail = (1.0 - confidence) / 2.0;
    return {quantile(ratios, tail), quantile(ratios, 1.0 - tail)};
}

}  // namespace hp::tune
