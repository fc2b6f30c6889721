// The campaign loop (DESIGN §6-§7): agents propose candidates into a queue from their own
// threads; a builder thread compiles them ahead of the executors; the worker evaluates them on
// the fast tier (an executor serving the first few layers, <= 4 shapes, short timing), promotes a
// significant fast-tier win to the slow tier (all layers, the full workload, longer timing), and
// makes a candidate the incumbent only on a significant slow-tier win (both executors then restart
// with it as the incumbent, so later candidates must beat it). Everything is written to the store
// as it happens; `resume` continues a killed campaign from the store, losing at most the
// candidates that were being evaluated (they are marked `lost`).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "hotpass/agents/command_agent.h"
#include "hotpass/agents/llm_agent.h"
#include "hotpass/campaign/options.h"
#include "hotpass/core/result.h"

namespace hp::campaign {

struct CampaignOptions {
    std::string model = "preset:tiny-llama";
    uint64_t seed = 0;
    std::string traffic = "chat";
    Budget budget{180, 0};
    bool budget_given = true;  // false on a resume: keep the campaign's own budget
    std::vector<AgentSpec> agents = {{"knob-random", 1}, {"knob-evolve", 1}};
    agents::CommandAgentConfig command;  // the `command` agents' turn budget and env (the line: command_lines)
    // The `command` agents' shell command lines: command agent i runs command_lines[i % size()], so
    // one campaign can run several coding-agent CLIs side by side.
    std::vector<std::string> command_lines;
    agents::LlmConfig llm;               // the `llm` agents' endpoint (the API key is never stored)
    std::filesystem::path workspaces;    // command/llm agents' workspaces; empty: <store dir>/workspaces
    bool two_tiers = true;  // false: --tiers slow
    int fast_layers = 2;
    int n_thread = 1;       // executor threads
    std::string device = "cpu";  // cpu | cuda: executors, candidates (nvcc) and tolerances of that device
    double fast_seconds_per_shape = 0.25;
    double slow_seconds_per_shape = 0.75;
    int fast_cases = 6;     // verification batches
    int slow_cases = 3;
    int reference_tokens = 16;  // CPU: per verification batch (tune::EvaluateOptions); CUDA: whole batches
    bool fresh_executor = false;  // restart the executor for every candidate (the bench's control)
    bool final_check = true;  // time the winner against the baseline at the end (slow tier)
    // An A/A run per tier before the first candidate: the incumbent against a second build of
    // itself. The difference it shows (|speedup - 1|) becomes the tier's minimum effect when above
    // tune::RunnerOptions::min_effect's 1%, so that a win must beat the difference between two
    // copies of the same code on this machine.
    bool calibrate = false;
    std::filesystem::path store;           // the database; objects/ and artifacts/ beside it
    std::filesystem::path out;             // winner/ and report.* land here; empty: ./hotpass-campaign-<id>
    std::filesystem::path baseline_source; // empty: the in-tree forward/<device>/baseline
    std::string baseline_plugin = "baseline";
    int64_t resume = 0;  // a campaign id to continue
    bool live = false;   // a live progress line (a terminal) instead of log lines
    uint64_t agent_seed = 0;  // 0: from the campaign id
};

struct CampaignSummary {
    int64_t id = 0;
    std::string status;
    int n_candidate = 0, n_built = 0, n_build_failed = 0, n_verified = 0, n_fast = 0, n_slow = 0, n_promoted = 0, n_lost = 0;
    int executor_starts = 0;
    double elapsed_s = 0;
    std::string winner = "baseline";
    double winner_speedup = 1;  // final check against the baseline, or the product of incumbent wins
    bool winner_measured = false;
    double winner_ci_low = 0, winner_ci_high = 0;
    bool winner_significant = false;
    std::filesystem::path report_dir;
};

// Runs (or resumes) a campaign to its budget. `stop` (may be null) ends it early, as if the
// budget ran out. Progress goes to stderr.
Result<CampaignSummary> run_campaign(const CampaignOptions &options, const std::atomic<bool> *stop = nullptr);

}  // namespace hp::campaign
