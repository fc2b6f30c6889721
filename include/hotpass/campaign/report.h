// The end of a campaign: the winner directory (sources + artifact + candidate.json) and a report
// as JSON (schema hotpass.campaign-report/1), Markdown and an SVG chart (best speedup over time,
// candidates evaluated per tier), all from the store, so a report can be rebuilt at any time.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/store/objects.h"
#include "hotpass/store/store.h"

namespace hp::campaign {

struct ReportFiles {
    std::filesystem::path markdown, json, svg, winner_dir;
    double winner_speedup = 1;
    bool winner_measured = false;  // true: timed against the baseline; false: the product of incumbent wins
    double winner_ci_low = 0, winner_ci_high = 0;
    bool winner_significant = false;
};

Result<nlohmann::json> campaign_report(store::Store &store, int64_t campaign_id);
std::string render_report_markdown(const nlohmann::json &report);
std::string render_report_svg(const nlohmann::json &report);
// Writes report.{json,md} and chart.svg into `out` and replaces out/winner, but only a winner
// folder hotpass wrote (or an empty one): anything else there is an error, not deleted.
Result<ReportFiles> write_report(store::Store &store, int64_t campaign_id, const store::ObjectStore &objects,
                                 const std::filesystem::path &out);
// Whether `out` can take a report: absent or a folder, and its winner/ absent, empty or one that
// write_report wrote. A campaign asks before it starts, so a bad --out costs no budget.
Status check_report_dir(const std::filesystem::path &out);

struct LeaderboardRow {
    store::CandidateRecord candidate;
    std::string tier;  // the highest tier it reached
    std::string code;  // its verdict there
    double speedup = 0, ci_low = 0, ci_high = 0;
    bool significant = false;
};
// Candidates ranked: slow tier before fast, then by speedup; build failures last.
Result<std::vector<LeaderboardRow>> leaderboard(store::Store &store, int64_t campaign_id);

}  // namespace hp::campaign
