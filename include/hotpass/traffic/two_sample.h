// Two-sample statistics on binned Distributions (the fine log-spaced histogram of distribution.h):
// the Kolmogorov-Smirnov statistic D (max distance of the two CDFs at bin edges, a lower bound of
// the exact D that is off by at most the mass of one ~9%-wide bin) with its asymptotic p-value,
// and the Population Stability Index over ~10 bins cut at the reference's deciles.
#pragma once

#include "hotpass/traffic/distribution.h"

namespace hp::traffic {

struct KsResult {
    double statistic = 0;  // D in [0, 1]
    double p_value = 1;    // P(D >= observed) under "same distribution", Kolmogorov asymptotics
};

KsResult ks_test(const Distribution &a, const Distribution &b);
// Kolmogorov's asymptotic tail with Stephens' small-sample correction.
double ks_p_value(double statistic, double n_a, double n_b);
// PSI = sum over bins of (recent - reference) * ln(recent / reference), shares floored at 1e-4.
// Rule of thumb: < 0.1 stable, 0.1-0.25 moderate shift, > 0.25 major shift.
double population_stability_index(const Distribution &reference, const Distribution &recent,
                                  int n_groups = 10);

}  // namespace hp::traffic
