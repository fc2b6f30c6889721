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

double signed_rank_p(const std::vector<double> &differences) {
    std::vector<std::pair<double, bool>> items;  // |d|, d > 0
    for (double d : differences) {
        if (d != 0 && std::isfinite(d)) items.push_back({std::fabs(d), d > 0});
    }
    const size_t n = items.size();
    if (n == 0) return 1.0;
    std::sort(items.begin(), items.end(), [](const auto &x, const auto &y) { return x.first < y.first; });
    // Mid-ranks for tied magnitudes (doubled, so they are whole numbers), and the tie correction
    // term sum(t^3 - t).
    std::vector<size_t> doubled_ranks(n);
    size_t doubled_w_plus = 0;
    double tie_term = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && items[j].first == items[i].first) ++j;
        for (size_t k = i; k < j; ++k) {
            doubled_ranks[k] = i + 1 + j;  // 2 x the mid-rank of positions i+1..j
            if (items[k].second) doubled_w_plus += doubled_ranks[k];
        }
        const double t = double(j - i);
        tie_term += t * t * t - t;
        i = j;
    }
    const double w_plus = double(doubled_w_plus) / 2.0, total = double(n) * double(n + 1) / 2.0;
    if (n <= 50) {
        // Under the null each difference's sign is + or - with probability 1/2, whatever the
        // magnitudes (ties included): count the sign patterns by their (doubled) rank sum. The
        // distribution is symmetric, so the two-sided p-value is twice the lower tail at the
        // smaller of W+ and W-.
        const size_t max_sum = n * (n + 1);
        std::vector<double> ways(max_sum + 1, 0.0);
        ways[0] = 1;
        for (const size_t rank : doubled_ranks) {
            for (size_t s = max_sum; s >= rank; --s) ways[s] += ways[s - rank];
        }
        const size_t smaller = std::min(doubled_w_plus, max_sum - doubled_w_plus);
        double tail = 0;
        for (size_t s = 0; s <= smaller; ++s) tail += ways[s];
        return std::min(1.0, 2.0 * tail / std::ldexp(1.0, int(n)));
    }
    const double mean = total / 2.0;
    const double variance = double(n) * double(n + 1) * double(2 * n + 1) / 24.0 - tie_term / 48.0;
    if (variance <= 0) return 1.0;
    const double z = (std::fabs(w_plus - mean) - 0.5) / std::sqrt(variance);  // continuity correction
    return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

std::vector<size_t> resample_pairs(size_t n_pair, std::mt19937_64 &rng) {
    std::vector<size_t> picks;
    picks.reserve(n_pair + 1);
    const size_t n_block = (n_pair + 1) / 2;
    while (picks.size() < n_pair) {
        const size_t first = 2 * (rng() % n_block);
        picks.push_back(first);
        if (first + 1 < n_pair) picks.push_back(first + 1);
    }
    return picks;
}

Interval bootstrap_ratio_of_medians(const std::vector<double> &numerator, const std::vector<double> &denominator, Resample resample,
                                    double confidence, int n_resample, uint64_t seed) {
    HP_CHECK(!numerator.empty() && !denominator.empty(), "bootstrap of empty samples");
    std::mt19937_64 rng(seed);
    const size_t n_pair = std::min(numerator.size(), denominator.size());
    std::vector<double> ratios, x(numerator.size()), y(denominator.size());
    ratios.reserve(size_t(n_resample));
    for (int r = 0; r < n_resample; ++r) {
        if (resample == Resample::paired) {
            x.clear();
            y.clear();
            for (const size_t pick : resample_pairs(n_pair, rng)) {
                x.push_back(numerator[pick]);
                y.push_back(denominator[pick]);
            }
        } else {
            for (double &value : x) value = numerator[rng() % numerator.size()];
            for (double &value : y) value = denominator[rng() % denominator.size()];
        }
        ratios.push_back(median(x) / median(y));
    }
    const double tail = (1.0 - confidence) / 2.0;
    return {quantile(ratios, tail), quantile(ratios, 1.0 - tail)};
}

}  // namespace hp::tune
