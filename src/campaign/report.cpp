#include "hotpass/campaign/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "hotpass/core/json_text.h"
#include "hotpass/core/mapped_file.h"

namespace hp::campaign {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int tier_rank(const std::string &tier) { return tier == "slow" ? 2 : tier == "fast" ? 1 : 0; }

}  // namespace

Result<std::vector<LeaderboardRow>> leaderboard(store::Store &store, int64_t campaign_id) {
    auto candidates = store.candidates(campaign_id);
    auto verdicts = store.campaign_verdicts(campaign_id);
    auto measurements = store.campaign_measurements(campaign_id);
    if (!candidates.ok()) return Error{candidates.error()};
    if (!verdicts.ok()) return Error{verdicts.error()};
    if (!measurements.ok()) return Error{measurements.error()};
    std::map<int64_t, LeaderboardRow> rows;
    for (const auto &candidate : *candidates) rows[candidate.id].candidate = candidate;
    for (const auto &verdict : *verdicts) {
        auto &row = rows[verdict.candidate_id];
        if (verdict.tier == "final" || tier_rank(verdict.tier) < tier_rank(row.tier)) continue;
        row.tier = verdict.tier;
        row.code = verdict.code;
    }
    for (const auto &m : *measurements) {
        auto &row = rows[m.candidate_id];
        if (m.tier != row.tier) continue;
        row.speedup = m.speedup;
        row.ci_low = m.ci_low;
        row.ci_high = m.ci_high;
        row.significant = m.significant;
    }
    std::vector<LeaderboardRow> out;
    for (auto &[id, row] : rows) {
        if (row.tier.empty() && row.code.empty()) row.code = row.candidate.state;
        out.push_back(std::move(row));
    }
    std::stable_sort(out.begin(), out.end(), [](const LeaderboardRow &a, const LeaderboardRow &b) {
        if (tier_rank(a.tier) != tier_rank(b.tier)) return tier_rank(a.tier) > tier_rank(b.tier);
        return a.speedup > b.speedup;
    });
    return out;
}

Result<json> campaign_report(store::Store &store, int64_t campaign_id) {
    auto campaign = store.campaign(campaign_id);
    if (!campaign.ok()) return Error{campaign.error()};
    auto candidates = store.candidates(campaign_id);
    auto verdicts = store.campaign_verdicts(campaign_id);
    auto measurements = store.campaign_measurements(campaign_id);
    auto promotions = store.promotions(campaign_id);
    auto profile = store.profile(campaign->profile_id);
    if (!candidates.ok() || !verdicts.ok() || !measurements.ok() || !promotions.ok()) return error("cannot read campaign {}", campaign_id);
    std::map<int64_t, store::CandidateRecord> by_id;
    std::map<std::string, store::CandidateRecord> by_hash;
    for (const auto &c : *candidates) {
        by_id[c.id] = c;
        by_hash[c.hash] = c;
    }
    json report = {{"schema", "hotpass.campaign-report/1"}};
    report["campaign"] = {{"id", campaign->id}, {"model", campaign->model}, {"hardware", campaign->hardware},
                          {"traffic", campaign->traffic}, {"tiers", campaign->tiers}, {"budget", campaign->budget},
                          {"status", campaign->status}, {"elapsed_s", campaign->elapsed_s}, {"options", campaign->options}};
    if (profile.ok()) report["workload"] = profile->workload;

    // Counts and the per-tier verdict histogram.
    std::map<std::string, std::map<std::string, int>> by_tier;
    int n_evaluation = 0;
    for (const auto &v : *verdicts) {
        ++by_tier[v.tier][v.code];
        if (v.tier != "final" && v.code != "lost") ++n_evaluation;
    }
    json states = json::object();
    for (const auto &c : *candidates) states[c.state] = states.value(c.state, 0) + 1;
    const double hours = std::max(campaign->elapsed_s, 1.0) / 3600;
    report["counts"] = {{"candidates", candidates->size()}, {"states", states}, {"verdicts", by_tier},
                        {"evaluations", n_evaluation}, {"experiments_per_hour", double(n_evaluation) / hours}};

    // Timeline: the best (incumbent) speedup, as the product of slow-tier wins, and the cumulative
    // evaluations per tier.
    json timeline = json::array({{{"elapsed_s", 0.0}, {"best_speedup", 1.0}}});
    double best = 1;
    for (const auto &p : *promotions) {
        if (p.to_tier != "incumbent") continue;
        best *= p.speedup;
        timeline.push_back({{"elapsed_s", p.elapsed_s}, {"best_speedup", best}, {"candidate", by_id[p.candidate_id].hash}});
    }
    report["timeline"] = timeline;
    json tiers = json::array();
    int n_fast = 0, n_slow = 0;
    for (const auto &v : *verdicts) {
        if (v.tier == "fast") ++n_fast;
        else if (v.tier == "slow") ++n_slow;
        else continue;
        tiers.push_back({{"elapsed_s", v.elapsed_s}, {"fast", n_fast}, {"slow", n_slow}});
    }
    report["evaluations_over_time"] = tiers;
    json promotion_list = json::array();
    for (const auto &p : *promotions) {
        promotion_list.push_back({{"candidate", by_id[p.candidate_id].hash}, {"from", p.from_tier}, {"to", p.to_tier},
                                  {"speedup", p.speedup}, {"elapsed_s", p.elapsed_s}});
    }
    report["promotions"] = promotion_list;

    // The winner: its identity, the final measurement against the baseline, its verification
    // record (every verdict) and its lineage back to the baseline.
    json winner = {{"hash", campaign->incumbent}};
    winner["speedup_vs_baseline"] = {{"weighted", best}, {"measured", false},
                                     {"note", campaign->incumbent == "baseline" ? "no candidate beat the baseline"
                                                                                : "product of the slow-tier wins (no final run)"}};
    if (by_hash.count(campaign->incumbent)) {
        const auto &w = by_hash[campaign->incumbent];
        winner["agent"] = w.agent;
        winner["parent"] = w.parent;
        winner["knobs"] = w.knobs;
        winner["notes"] = w.notes;
        json verification = json::array();
        const auto winner_verdicts = store.verdicts(w.id);
        if (winner_verdicts.ok()) for (const auto &v : *winner_verdicts) {
            verification.push_back({{"tier", v.tier}, {"code", v.code}, {"reason", v.reason}, {"elapsed_s", v.elapsed_s}});
        }
        winner["verification"] = verification;
        const auto winner_measurements = store.measurements(w.id);
        if (winner_measurements.ok()) for (const auto &m : *winner_measurements) {
            if (m.tier != "final") continue;
            winner["speedup_vs_baseline"] = {{"weighted", m.speedup}, {"ci", {m.ci_low, m.ci_high}}, {"significant", m.significant},
                                             {"baseline_ms", m.incumbent_ms}, {"winner_ms", m.candidate_ms}, {"shapes", m.shapes},
                                             {"measured", true}, {"note", "slow tier, timed against the default-knob baseline at the end"}};
        }
        json lineage = json::array();
        std::string hash = w.hash;
        for (int depth = 0; depth < 64 && by_hash.count(hash); ++depth) {
            const auto &c = by_hash[hash];
            lineage.push_back({{"hash", c.hash}, {"agent", c.agent}, {"knobs", c.knobs}, {"notes", c.notes}});
            hash = c.parent;
        }
        lineage.push_back({{"hash", hash}});
        winner["lineage"] = lineage;
    }
    report["winner"] = winner;

    json top = json::array();
    auto rows = leaderboard(store, campaign_id);
    if (rows.ok()) {
        for (size_t i = 0; i < rows->size() && i < 10; ++i) {
            const auto &r = (*rows)[i];
            top.push_back({{"hash", r.candidate.hash}, {"agent", r.candidate.agent}, {"tier", r.tier}, {"verdict", r.code},
                           {"speedup", r.speedup}, {"ci", {r.ci_low, r.ci_high}}, {"knobs", r.candidate.knobs}});
        }
    }
    report["leaderboard"] = top;
    return report;
}

std::string render_report_markdown(const json &r) {
    const json &c = r["campaign"];
    const json &w = r["winner"];
    const json &s = w["speedup_vs_baseline"];
    std::string md = fmt::format("# hotpass campaign {}\n\n", c["id"].get<int64_t>());
    md += fmt::format("- model: `{}`\n- hardware: {}\n- traffic: {}\n- tiers: {}\n- budget: {}\n- status: {}, {:.0f} s\n",
                      c["model"].get<std::string>(), c["hardware"].get<std::string>(), c["traffic"].get<std::string>(),
                      c["tiers"].get<std::string>(), c["budget"].dump(), c["status"].get<std::string>(), c["elapsed_s"].get<double>());
    md += fmt::format("- candidates: {}, evaluations: {} ({:.0f} per hour)\n\n", r["counts"]["candidates"].get<int>(),
                      r["counts"]["evaluations"].get<int>(), r["counts"]["experiments_per_hour"].get<double>());
    md += "## Winner\n\n";
    if (w["hash"] == "baseline") {
        md += "No candidate beat the baseline significantly on the slow tier; the winner is the baseline.\n\n";
    } else {
        md += fmt::format("`{}` by {} — knobs `{}`\n\n", w["hash"].get<std::string>(), w.value("agent", ""), w.value("knobs", json()).dump());
        md += fmt::format("Speedup over the default-knob baseline (weighted): **{:.3f}x**", s["weighted"].get<double>());
        if (s.value("measured", false)) {
            md += fmt::format(" (95% CI {:.3f}-{:.3f}, {})\n\n", s["ci"][0].get<double>(), s["ci"][1].get<double>(),
                              s.value("significant", false) ? "significant" : "not significant");
            md += "| shape | weight | baseline ms | winner ms | speedup | 95% CI |\n| --- | --- | --- | --- | --- | --- |\n";
            for (const json &shape : s["shapes"]) {
                md += fmt::format("| {} | {:.2f} | {:.3f} | {:.3f} | {:.3f}x | {:.3f}-{:.3f} |\n", shape.value("name", ""),
                                  shape.value("weight", 0.0), shape.value("incumbent_ms", 0.0), shape.value("candidate_ms", 0.0),
                                  shape.value("speedup", 0.0), shape.value("speedup_ci", json::array({0.0, 0.0}))[0].get<double>(),
                                  shape.value("speedup_ci", json::array({0.0, 0.0}))[1].get<double>());
            }
            md += "\n";
        } else {
            md += fmt::format(" ({})\n\n", s.value("note", ""));
        }
        md += "Verification record:\n\n";
        for (const json &v : w.value("verification", json::array())) {
            md += fmt::format("- {} tier: `{}` — {}\n", v["tier"].get<std::string>(), v["code"].get<std::string>(),
                              v["reason"].get<std::string>());
        }
        md += "\nLineage (newest first):\n\n";
        for (const json &l : w.value("lineage", json::array())) {
            md += fmt::format("- `{}` {} {}\n", l["hash"].get<std::string>(), l.value("agent", ""), l.value("notes", ""));
        }
        md += "\n";
    }
    md += "## Verdicts per tier\n\n";
    for (auto tier = r["counts"]["verdicts"].begin(); tier != r["counts"]["verdicts"].end(); ++tier) {
        md += fmt::format("- {}: {}\n", tier.key(), tier.value().dump());
    }
    md += "\n## Leaderboard\n\n| candidate | agent | tier | verdict | speedup | 95% CI | knobs |\n| --- | --- | --- | --- | --- | --- | --- |\n";
    for (const json &row : r["leaderboard"]) {
        const double speedup = row["speedup"].get<double>();
        const std::string figures = speedup > 0 ? fmt::format("{:.3f}x | {:.3f}-{:.3f}", speedup, row["ci"][0].get<double>(),
                                                              row["ci"][1].get<double>())
                                                : std::string("- | -");
        md += fmt::format("| `{}` | {} | {} | {} | {} | `{}` |\n", row["hash"].get<std::string>().substr(0, 12),
                          row["agent"].get<std::string>(), row["tier"].get<std::string>(), row["verdict"].get<std::string>(), figures,
                          row["knobs"].dump());
    }
    md += "\n![best speedup over time](chart.svg)\n";
    return md;
}

std::string render_report_svg(const json &r) {
    constexpr double width = 640, height = 400, left = 60, right = 20, panel = 140;
    const double t_max = std::max(1.0, r["campaign"]["elapsed_s"].get<double>());
    double s_max = 1.05, s_min = 1.0;
    for (const json &p : r["timeline"]) s_max = std::max(s_max, p["best_speedup"].get<double>() * 1.02);
    int n_max = 1;
    for (const json &p : r["evaluations_over_time"]) n_max = std::max({n_max, p["fast"].get<int>(), p["slow"].get<int>()});
    auto x = [&](double t) { return left + (width - left - right) * t / t_max; };
    auto y_top = [&](double s) { return 30 + panel - panel * (s - s_min) / (s_max - s_min); };
    auto y_bottom = [&](double n) { return 230 + panel - panel * n / double(n_max); };
    std::string svg = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
                                  width, height);
    svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    svg += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\">campaign {}: best speedup over the baseline (product of slow-tier wins)</text>\n", left,
                       r["campaign"]["id"].get<int64_t>());
    svg += fmt::format("<text x=\"{}\" y=\"220\" font-size=\"13\">candidates evaluated per tier</text>\n", left);
    for (double base : {30.0, 230.0}) {
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/><line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"black\"/>\n",
                           left, base, base + panel, width - right);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.2f}x</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.2f}x</text>\n",
                       left - 4, y_top(s_max) + 4, s_max, left - 4, y_top(s_min) + 4, s_min);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n", left - 4,
                       y_bottom(n_max) + 4, n_max, left - 4, y_bottom(0) + 4);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0f} s</text>\n", width - right, height - 12, t_max);
    // Best speedup: a step line.
    std::string points = fmt::format("{:.1f},{:.1f}", x(0), y_top(1));
    double last = 1;
    for (const json &p : r["timeline"]) {
        const double t = p["elapsed_s"].get<double>(), s = p["best_speedup"].get<double>();
        points += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", x(t), y_top(last), x(t), y_top(s));
        last = s;
    }
    points += fmt::format(" {:.1f},{:.1f}", x(t_max), y_top(last));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n", points);
    // Evaluations per tier.
    for (const auto &[tier, colour] : {std::pair{"fast", "#ff7f0e"}, std::pair{"slow", "#2ca02c"}}) {
        std::string line = fmt::format("{:.1f},{:.1f}", x(0), y_bottom(0));
        for (const json &p : r["evaluations_over_time"]) line += fmt::format(" {:.1f},{:.1f}", x(p["elapsed_s"].get<double>()), y_bottom(p[tier].get<int>()));
        svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", colour, line);
    }
    svg += fmt::format("<text x=\"{}\" y=\"245\" fill=\"#ff7f0e\">fast tier</text><text x=\"{}\" y=\"260\" fill=\"#2ca02c\">slow tier</text>\n",
                       left + 8, left + 8);
    svg += "</svg>\n";
    return svg;
}

Status check_report_dir(const fs::path &out) {
    std::error_code code;
    if (fs::exists(out, code) && !fs::is_directory(out, code)) return error("--out {}: exists and is not a folder", out.string());
    const fs::path winner = out / "winner";
    if (!fs::exists(winner, code) || (fs::is_directory(winner, code) && fs::is_empty(winner, code))) return {};
    // A winner folder written by write_report: its candidate.json names the winner and its campaign.
    auto text = read_text_file(winner / "candidate.json");
    const json metadata = text.ok() ? json::parse(*text, nullptr, false) : json();
    if (metadata.is_object() && metadata.contains("hash") && metadata.contains("campaign")) return {};
    return error("{} holds files hotpass did not write (a report replaces winner/ there); choose another --out or move them",
                 winner.string());
}

Result<ReportFiles> write_report(store::Store &store, int64_t campaign_id, const store::ObjectStore &objects, const fs::path &out) {
    auto report = campaign_report(store, campaign_id);
    if (!report.ok()) return Error{report.error()};
    HP_TRY(check_report_dir(out));
    std::error_code code;
    fs::create_directories(out, code);
    if (code) return error("cannot create {}: {}", out.string(), code.message());
    ReportFiles files;
    files.json = out / "report.json";
    files.markdown = out / "report.md";
    files.svg = out / "chart.svg";
    HP_TRY(write_file_atomic(files.json, report->dump(2) + "\n"));
    HP_TRY(write_file_atomic(files.markdown, render_report_markdown(*report)));
    HP_TRY(write_file_atomic(files.svg, render_report_svg(*report)));
    const json &speedup = (*report)["winner"]["speedup_vs_baseline"];
    files.winner_speedup = speedup.value("weighted", 1.0);
    files.winner_measured = speedup.value("measured", false);
    if (files.winner_measured) {
        files.winner_ci_low = speedup["ci"][0];
        files.winner_ci_high = speedup["ci"][1];
        files.winner_significant = speedup.value("significant", false);
    }

    // The winner directory: its sources, candidate.json and the built artifact, put together in
    // winner.tmp and renamed into place, so a failure never leaves a winner/ without its
    // candidate.json (check_report_dir would refuse that folder from then on).
    const std::string winner = (*report)["winner"]["hash"];
    files.winner_dir = out / "winner";
    const fs::path staging = out / "winner.tmp";
    fs::remove_all(staging, code);
    auto found = store.find_candidates(winner);
    if (winner == "baseline" || !found.ok() || found->empty()) {
        fs::remove_all(files.winner_dir, code);
        return files;
    }
    const store::CandidateRecord &record = found->front();
    auto staged = [&]() -> Status {
        fs::create_directories(staging, code);
        fs::copy(objects.sources(record.source_hash), staging, fs::copy_options::recursive | fs::copy_options::overwrite_existing, code);
        if (code) return error("cannot copy the winner's sources: {}", code.message());
        json metadata = {{"parent", record.parent}, {"agent", record.agent}, {"knobs", record.knobs}, {"notes", record.notes},
                         {"hash", record.hash}, {"campaign", campaign_id}};
        HP_TRY(write_file_atomic(staging / "candidate.json", json_text(metadata, 2) + "\n"));
        const auto winner_builds = store.builds(record.id);
        if (winner_builds.ok()) for (const auto &build : *winner_builds) {
            if (!build.ok || !fs::exists(build.artifact)) continue;
            fs::copy_file(build.artifact, staging / fs::path(build.artifact).filename(), fs::copy_options::overwrite_existing, code);
            if (code) return error("cannot copy the winner's artifact: {}", code.message());
            break;
        }
        fs::remove_all(files.winner_dir, code);
        fs::rename(staging, files.winner_dir, code);
        if (code) return error("cannot move {} to {}: {}", staging.string(), files.winner_dir.string(), code.message());
        return {};
    }();
    if (!staged.ok()) {
        fs::remove_all(staging, code);
        return Error{staged.error()};
    }
    return files;
}

}  // namespace hp::campaign
