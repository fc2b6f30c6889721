// The drift statistics, the decision and its reason.
#include "hotpass/traffic/drift.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "hotpass/traffic/json_codec.h"
#include "hotpass/traffic/profile_report.h"
#include "hotpass/traffic/two_sample.h"

namespace hp::traffic {

namespace {

std::string percent_change(double before, double after) {
    if (before == 0) return after == 0 ? "+0%" : "new";
    return fmt::format("{:+.0f}%", (after / before - 1) * 100);
}

DriftStatistic statistic(std::string name, double value, double threshold, std::string detail) {
    DriftStatistic result{std::move(name), value, threshold, 0, false, std::move(detail)};
    result.ratio = threshold > 0 ? value / threshold : 0;
    result.triggered = result.ratio >= 1;
    return result;
}

void add_length_statistics(DriftReport &report, const char *label, const Distribution &reference,
                           const Distribution &recent, const DriftThresholds &thresholds) {
    const KsResult ks = ks_test(reference, recent);
    DriftStatistic ks_stat = statistic(
        fmt::format("ks_{}", label), ks.statistic, thresholds.ks,
        ks.p_value < 1e-12 ? fmt::format("KS {:.2f} (p<1e-12)", ks.statistic)
                           : fmt::format("KS {:.2f} (p={:.2g})", ks.statistic, ks.p_value));
    if (ks.p_value >= thresholds.ks_alpha) {
        ks_stat.ratio = std::min(ks_stat.ratio, 0.99);
        ks_stat.triggered = false;
    }
    const double psi = population_stability_index(reference, recent);
    const double p90_before = double(reference.p90), p90_after = double(recent.p90);
    const double p90_change = p90_before > 0 ? std::abs(p90_after / p90_before - 1) : 0;
    report.statistics.push_back(
        statistic(fmt::format("p90_{}", label), p90_change, thresholds.p90_change,
                  fmt::format("P90 {} {} → {} tokens ({})", label, format_tokens(p90_before),
                              format_tokens(p90_after), percent_change(p90_before, p90_after))));
    report.statistics.push_back(std::move(ks_stat));
    report.statistics.push_back(statistic(fmt::format("psi_{}", label), psi, thresholds.psi,
                                          fmt::format("PSI {:.2f}", psi)));
}

// The reason: per quantity (input, output, prefix, rate, experts), its triggered details joined
// by ", ", quantities ordered by their largest ratio and joined by "; ".
std::string build_reason(const DriftReport &report) {
    std::vector<std::pair<double, std::string>> groups;
    for (const char *quantity : {"input", "output", "prefix", "rate", "expert"}) {
        double largest = 0;
        std::string text;
        for (const DriftStatistic &stat : report.statistics) {
            if (!stat.triggered || stat.name.find(quantity) == std::string::npos) continue;
            largest = std::max(largest, stat.ratio);
            text += (text.empty() ? "" : ", ") + stat.detail;
        }
        // Name the P90 move whenever the input/output distribution drifted, for context.
        if (!text.empty() &&
            (std::string_view(quantity) == "input" || std::string_view(quantity) == "output")) {
            const std::string p90_name = fmt::format("p90_{}", quantity);
            for (const DriftStatistic &stat : report.statistics)
                if (stat.name == p90_name && !stat.triggered) text = stat.detail + ", " + text;
        }
        if (!text.empty()) groups.emplace_back(largest, text);
    }
    std::sort(groups.begin(), groups.end(),
              [](const auto &a, const auto &b) { return a.first > b.first; });
    std::string reason;
    for (const auto &[ratio, text] : groups) reason += (reason.empty() ? "" : "; ") + text;
    return reason;
}

}  // namespace

DriftReport compare_profiles(const Profile &reference, const Profile &recent,
                             const DriftThresholds &thresholds) {
    DriftReport report;
    if (reference.requests < thresholds.min_requests || recent.requests < thresholds.min_requests) {
        report.enough_data = false;
        report.reason = fmt::format("no decision: not enough requests ({} and {}, need {} each)",
                                    reference.requests, recent.requests, thresholds.min_requests);
        return report;
    }
    add_length_statistics(report, "input", reference.input_tokens, recent.input_tokens, thresholds);
    add_length_statistics(report, "output", reference.output_tokens, recent.output_tokens,
                          thresholds);
    if (reference.prefix.known && recent.prefix.known) {
        const double before = reference.prefix.reuse, after = recent.prefix.reuse;
        report.statistics.push_back(
            statistic("prefix_reuse", std::abs(after - before), thresholds.prefix_reuse_change,
                      fmt::format("prefix reuse {:.0f}% → {:.0f}%", before * 100, after * 100)));
    }
    const double rate_before = reference.arrivals.rate_rps, rate_after = recent.arrivals.rate_rps;
    if (rate_before > 0 && rate_after > 0) {
        const double change = std::max(rate_after / rate_before, rate_before / rate_after) - 1;
        report.statistics.push_back(
            statistic("rate", change, thresholds.rate_change,
                      fmt::format("rate {:.2f} → {:.2f} req/s ({})", rate_before, rate_after,
                                  percent_change(rate_before, rate_after))));
    }
    const ExpertLoad &load_before = reference.expert_load, &load_after = recent.expert_load;
    if (load_before.mean_imbalance > 0 && load_after.mean_imbalance > 0) {
        const double change = std::abs(load_after.mean_imbalance / load_before.mean_imbalance - 1);
        report.statistics.push_back(
            statistic("expert_imbalance", change, thresholds.expert_imbalance_change,
                      fmt::format("expert imbalance (max/mean) {:.2f} → {:.2f}",
                                  load_before.mean_imbalance, load_after.mean_imbalance)));
        const double distance = expert_load_distance(load_before, load_after);
        report.statistics.push_back(
            statistic("expert_load_distance", distance, thresholds.expert_load_distance,
                      fmt::format("expert load moved {:.0f}% of tokens", distance * 100)));
    }
    const DriftStatistic *largest = nullptr;
    for (const DriftStatistic &stat : report.statistics) {
        if (!largest || stat.ratio > largest->ratio) largest = &stat;
        report.drift = report.drift || stat.triggered;
    }
    report.score = largest ? largest->ratio : 0;
    if (report.drift) {
        report.reason = build_reason(report);
    } else {
        report.reason = largest
                            ? fmt::format("no drift: largest change {} is {:.0f}% of its threshold",
                                          largest->detail, largest->ratio * 100)
                            : "no drift: nothing to compare";
    }
    return report;
}

std::string drift_report_to_json(const DriftReport &report, int indent) {
    nlohmann::json statistics = nlohmann::json::array();
    for (const DriftStatistic &stat : report.statistics)
        statistics.push_back({{"name", stat.name},
                              {"value", round_significant(stat.value, 4)},
                              {"threshold", stat.threshold},
                              {"ratio", round_significant(stat.ratio, 4)},
                              {"triggered", stat.triggered},
                              {"detail", stat.detail}});
    nlohmann::json json = {{"decision", report.drift ? "drift" : "no drift"},
                           {"score", round_significant(report.score, 4)},
                           {"enough_data", report.enough_data},
                           {"reason", report.reason},
                           {"statistics", statistics}};
    return json.dump(indent);
}

std::string format_drift_report(const DriftReport &report) {
    std::string text = fmt::format("{:<22} {:>10} {:>10} {:>7}  {}\n", "statistic", "value",
                                   "threshold", "ratio", "detail");
    for (const DriftStatistic &stat : report.statistics)
        text += fmt::format("{:<22} {:>10.4g} {:>10.4g} {:>7.2f}{} {}\n", stat.name, stat.value,
                            stat.threshold, stat.ratio, stat.triggered ? "*" : " ", stat.detail);
    text += fmt::format("score {:.2f}: {}{}\n", report.score, report.drift ? "DRIFT: " : "",
                        report.reason);
    return text;
}

}  // namespace hp::traffic
