// ValueCounter keeps exact weighted counts in an ordered map; summaries walk it once.
#include "hotpass/traffic/distribution.h"

#include <algorithm>
#include <cmath>

#include "hotpass/core/check.h"

namespace hp::traffic {

const std::vector<uint64_t> &histogram_edges() {
    static const std::vector<uint64_t> edges = [] {
        std::vector<uint64_t> result{0};
        for (int k = 0; k <= 8 * 40; ++k) {
            const uint64_t edge = uint64_t(std::ceil(std::exp2(k / 8.0) - 1e-9));
            if (edge > result.back()) result.push_back(edge);
        }
        return result;
    }();
    return edges;
}

size_t histogram_bin(uint64_t value) {
    const std::vector<uint64_t> &edges = histogram_edges();
    return size_t(std::upper_bound(edges.begin(), edges.end(), value) - edges.begin()) - 1;
}

void ValueCounter::add(uint64_t value, uint64_t weight) {
    if (weight == 0) return;
    weight_by_value_[value] += weight;
    count_ += weight;
    sum_ += (long double)value * weight;
}

uint64_t ValueCounter::quantile(double p) const {
    if (count_ == 0) return 0;
    const uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(p * double(count_) - 1e-9)));
    uint64_t seen = 0;
    for (const auto &[value, weight] : weight_by_value_) {
        seen += weight;
        if (seen >= rank) return value;
    }
    return weight_by_value_.rbegin()->first;
}

Distribution ValueCounter::summarize() const {
    Distribution summary;
    summary.count = count_;
    if (count_ == 0) return summary;
    summary.mean = double(sum_ / count_);
    summary.min = weight_by_value_.begin()->first;
    summary.max = weight_by_value_.rbegin()->first;
    summary.p50 = quantile(0.50);
    summary.p90 = quantile(0.90);
    summary.p99 = quantile(0.99);
    const std::vector<uint64_t> &edges = histogram_edges();
    for (const auto &[value, weight] : weight_by_value_) {
        const size_t bin = histogram_bin(value);
        if (summary.bins.empty() || summary.bins.back().lo != edges[bin]) {
            const uint64_t hi = bin + 1 < edges.size() ? edges[bin + 1] : UINT64_MAX;
            summary.bins.push_back({edges[bin], hi, 0});
        }
        summary.bins.back().count += weight;
    }
    return summary;
}

size_t ValueCounter::memory_bytes() const {
    // A std::map node: three pointers, a colour word and the key/value pair.
    return weight_by_value_.size() * (4 * sizeof(void *) + 2 * sizeof(uint64_t));
}

double histogram_quantile(const Distribution &distribution, double p) {
    if (distribution.count == 0) return 0;
    const double rank = p * double(distribution.count);
    double seen = 0;
    for (const HistogramBin &bin : distribution.bins) {
        if (seen + double(bin.count) >= rank) {
            const double lo = double(std::max(bin.lo, distribution.min));
            const double hi = double(std::min(bin.hi, distribution.max + 1));
            return lo + (hi - lo) * (rank - seen) / double(bin.count);
        }
        seen += double(bin.count);
    }
    return double(distribution.max);
}

}  // namespace hp::traffic
