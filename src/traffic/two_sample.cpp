// KS and PSI on the shared histogram edges: both distributions use histogram_edges(), so bins
// line up by their lower edge.
#include "hotpass/traffic/two_sample.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hp::traffic {

KsResult ks_test(const Distribution &a, const Distribution &b) {
    KsResult result;
    if (a.count == 0 || b.count == 0) return result;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> by_edge;  // lo -> (count a, count b)
    for (const HistogramBin &bin : a.bins) by_edge[bin.lo].first += bin.count;
    for (const HistogramBin &bin : b.bins) by_edge[bin.lo].second += bin.count;
    double cumulative_a = 0, cumulative_b = 0;
    for (const auto &[lo, counts] : by_edge) {
        cumulative_a += double(counts.first) / double(a.count);
        cumulative_b += double(counts.second) / double(b.count);
        result.statistic = std::max(result.statistic, std::abs(cumulative_a - cumulative_b));
    }
    result.p_value = ks_p_value(result.statistic, double(a.count), double(b.count));
    return result;
}

double ks_p_value(double statistic, double n_a, double n_b) {
    if (statistic <= 0 || n_a <= 0 || n_b <= 0) return 1;
    const double n_effective = n_a * n_b / (n_a + n_b);
    const double root = std::sqrt(n_effective);
    const double lambda = (root + 0.12 + 0.11 / root) * statistic;
    if (lambda < 0.2) return 1;
    double sum = 0, sign = 1;
    for (int j = 1; j <= 100; ++j) {
        const double term = sign * std::exp(-2.0 * j * j * lambda * lambda);
        sum += term;
        if (std::abs(term) < 1e-12) break;
        sign = -sign;
    }
    return std::clamp(2 * sum, 0.0, 1.0);
}

double population_stability_index(const Distribution &reference, const Distribution &recent,
                                  int n_groups) {
    if (reference.count == 0 || recent.count == 0) return 0;
    // Group boundaries: the lower edges of the reference bins at which its CDF passes k/n_groups.
    std::vector<uint64_t> boundaries;
    double cumulative = 0;
    int next_group = 1;
    for (const HistogramBin &bin : reference.bins) {
        if (cumulative >= double(next_group) / n_groups && cumulative < 1.0) {
            boundaries.push_back(bin.lo);
            while (cumulative >= double(next_group) / n_groups) ++next_group;
        }
        cumulative += double(bin.count) / double(reference.count);
    }
    const auto group_of = [&](uint64_t lo) {
        return size_t(std::upper_bound(boundaries.begin(), boundaries.end(), lo) -
                      boundaries.begin());
    };
    std::vector<double> share_reference(boundaries.size() + 1, 0),
        share_recent(boundaries.size() + 1, 0);
    for (const HistogramBin &bin : reference.bins)
        share_reference[group_of(bin.lo)] += double(bin.count) / double(reference.count);
    for (const HistogramBin &bin : recent.bins)
        share_recent[group_of(bin.lo)] += double(bin.count) / double(recent.count);
    double psi = 0;
    for (size_t group = 0; group < share_reference.size(); ++group) {
        const double p = std::max(share_reference[group], 1e-4),
                     q = std::max(share_recent[group], 1e-4);
        psi += (q - p) * std::log(q / p);
    }
    return psi;
}

}  // namespace hp::traffic
