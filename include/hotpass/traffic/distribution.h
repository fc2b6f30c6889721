// Distribution: the plain summary of a non-negative integer quantity (token lengths, batch sizes,
// milliseconds): total weight, mean, nearest-rank percentiles and a log-spaced histogram fine
// enough (8 bins per octave) for two-sample tests. ValueCounter accumulates one exactly, with
// memory bounded by the number of distinct values, not by the number of samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace hp::traffic {

struct HistogramBin {
    uint64_t lo = 0, hi = 0;  // the bin holds values in [lo, hi)
    uint64_t count = 0;       // total weight of those values
};

struct Distribution {
    uint64_t count = 0;  // total weight (samples, or microseconds for time-weighted ones)
    double mean = 0;
    uint64_t min = 0, max = 0;
    uint64_t p50 = 0, p90 = 0, p99 = 0;  // nearest rank: smallest v with weight(<= v) >= p * count
    std::vector<HistogramBin> bins;      // non-empty bins only, ascending
};

// The lower edges of the histogram bins: 0, 1, 2, ... then ceil(2^(k/8)) without repeats.
const std::vector<uint64_t> &histogram_edges();
// The index into histogram_edges() of the bin that holds `value`.
size_t histogram_bin(uint64_t value);

class ValueCounter {
  public:
    void add(uint64_t value, uint64_t weight = 1);
    uint64_t count() const { return count_; }
    // The nearest-rank quantile, p in [0, 1]; 0 when empty.
    uint64_t quantile(double p) const;
    Distribution summarize() const;
    size_t memory_bytes() const;  // approximate heap use of the counts

  private:
    std::map<uint64_t, uint64_t> weight_by_value_;
    uint64_t count_ = 0;
    long double sum_ = 0;
};

// Percentile of a Distribution from its histogram (linear within a bin); for drift of P90s when
// only the stored bins are at hand.
double histogram_quantile(const Distribution &distribution, double p);

}  // namespace hp::traffic
