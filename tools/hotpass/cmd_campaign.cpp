// `hotpass optimize` (run or resume a campaign), `hotpass leaderboard`, `hotpass show`,
// `hotpass campaigns`: thin front ends over the campaign and store modules.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "commands.h"
#include "validators.h"
#include "hotpass/campaign/campaign.h"
#include "hotpass/campaign/report.h"
#include "hotpass/core/subprocess.h"
#include "hotpass/model/model.h"
#include "hotpass/store/objects.h"
#include "hotpass/store/store.h"

namespace hp::cli {
namespace {

std::atomic<bool> g_stop{false};
// The first Ctrl-C (or SIGTERM) stops the campaign after the evaluation in progress, which then
// counts as run (the executors sit in their own process group, so the terminal's SIGINT does not
// kill them mid-candidate); a second one quits at once, killing the builds and agent turns in
// flight (the executors die with hotpass), and `--resume` marks that candidate lost.
void on_signal(int) {
    if (g_stop.exchange(true)) {
        kill_tracked_process_groups();
        _exit(130);
    }
    constexpr char kMessage[] = "\nhotpass: stopping after the evaluation in progress (Ctrl-C again quits now)\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
}

struct OptimizeArgs {
    std::string model = "auto";
    std::string traffic = "chat";
    bool model_given = false, traffic_given = false;  // on the command line, whatever the value
    std::string budget;
    std::string agents = "knob-search:2";
    std::string tiers = "fast,slow";
    int64_t resume = 0;
    std::string out;
    std::string store;
    int fast_layers = 2;
    int n_thread = 1;
    std::string device = "cpu";
    uint64_t seed = 0;
    uint64_t agent_seed = 0;
    bool no_final = false;
    bool fresh_executor = false;
    bool calibrate = false;
    int reference_tokens = 16;
    std::string baseline_source;
    std::vector<std::string> agent_commands;
    double agent_turn_seconds = 600;
    int agent_turns = 10;
    std::vector<std::string> agent_env;
    std::string llm_url, llm_model;
    int llm_max_tokens = 8192;
    double llm_timeout = 300;
};

// The default model for a budget: llama-300m (16 layers, 600 MB of bf16 weights) needs minutes
// per slow-tier evaluation on a 2-core CPU (executor start, float32 reference verification over
// all layers, ~35 ms decode steps), so short budgets use tiny-llama.
// On a GPU, llama-3.2-1b's weights are generated on the device in a second or two.
std::string auto_model(const campaign::Budget &budget, const std::string &device) {
    if (device == "cuda") return "preset:llama-3.2-1b";
    return budget.seconds >= 15 * 60 ? "preset:llama-300m" : "preset:tiny-llama";
}

int run_optimize(const OptimizeArgs &args) {
    if (args.resume && (args.model_given || args.traffic_given)) {
        fmt::print(stderr, "error: --resume {} continues with the model and traffic the campaign started with; leave out --model and --traffic\n",
                   args.resume);
        return 2;
    }
    campaign::CampaignOptions options;
    options.budget_given = !args.budget.empty();
    auto budget = campaign::parse_budget(args.budget.empty() ? "3m" : args.budget);
    if (!budget.ok()) {
        fmt::print(stderr, "error: {}\n", budget.error());
        return 2;
    }
    options.budget = *budget;
    auto agents = campaign::parse_agent_specs(args.agents);
    if (!agents.ok()) {
        fmt::print(stderr, "error: {}\n", agents.error());
        return 2;
    }
    options.agents = *agents;
    options.command_lines = args.agent_commands;
    options.command.turn_seconds = args.agent_turn_seconds;
    options.command.max_turns = args.agent_turns;
    options.command.env = args.agent_env;
    for (const std::string &item : args.agent_env) {
        if (item.find('=') == std::string::npos || item.front() == '=') {
            fmt::print(stderr, "error: --agent-env wants KEY=VALUE, got '{}'\n", item);
            return 2;
        }
    }
    options.llm = agents::llm_config_from_env();
    if (!args.llm_url.empty()) options.llm.base_url = args.llm_url;
    if (!args.llm_model.empty()) options.llm.model = args.llm_model;
    options.llm.max_tokens = args.llm_max_tokens;
    options.llm.max_turns = args.agent_turns;
    options.llm.timeout_seconds = args.llm_timeout;
    options.model = args.model == "auto" ? auto_model(options.budget, args.device) : args.model;
    // What the campaign would refuse before it starts, as usage errors (exit 2).
    if (!args.resume) {
        if (Status model = model::check_model_spec(options.model); !model.ok()) {
            fmt::print(stderr, "error: --model {}: {}\n", options.model, model.error());
            return 2;
        }
    }
    if (!args.out.empty()) {
        if (Status out = campaign::check_report_dir(args.out); !out.ok()) {
            fmt::print(stderr, "error: {}\n", out.error());
            return 2;
        }
    }
    options.device = args.device;
    options.traffic = args.traffic;
    options.two_tiers = args.tiers == "fast,slow";
    options.fast_layers = args.fast_layers;
    options.n_thread = args.n_thread;
    options.seed = args.seed;
    options.agent_seed = args.agent_seed;
    options.final_check = !args.no_final;
    options.fresh_executor = args.fresh_executor;
    options.calibrate = args.calibrate;
    options.reference_tokens = args.reference_tokens;
    options.resume = args.resume;
    options.out = args.out;
    options.store = args.store.empty() ? campaign::default_store_path() : std::filesystem::path(args.store);
    options.baseline_source = args.baseline_source;
    options.live = isatty(STDERR_FILENO);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    auto summary = campaign::run_campaign(options, &g_stop);
    if (!summary.ok()) {
        fmt::print(stderr, "error: {}\n", summary.error());
        return 1;
    }
    const auto &s = *summary;
    fmt::print("campaign   {} ({}, {:.0f} s)\n", s.id, s.status, s.elapsed_s);
    fmt::print("candidates {} proposed, {} built ({} failed to build), {} verified, {} promoted to the slow tier, {} lost\n",
               s.n_candidate, s.n_built + s.n_build_failed, s.n_build_failed, s.n_verified, s.n_promoted, s.n_lost);
    fmt::print("tiers      {} fast-tier and {} slow-tier evaluations, {:.0f} experiments/hour, {} executor starts\n", s.n_fast, s.n_slow,
               double(s.n_fast + s.n_slow) / std::max(1.0, s.elapsed_s) * 3600, s.executor_starts);
    if (s.winner == "baseline") {
        fmt::print("winner     baseline (no candidate beat it significantly on the slow tier)\n");
    } else {
        const std::string how = s.winner_measured
                                    ? fmt::format("slow tier, weighted, timed against the baseline at the end: 95% CI {:.3f}-{:.3f}, {}",
                                                  s.winner_ci_low, s.winner_ci_high, s.winner_significant ? "significant" : "NOT significant")
                                    : "estimate: the product of its slow-tier wins";
        fmt::print("winner     {} {:.3f}x the baseline ({})\n", s.winner.substr(0, 16), s.winner_speedup, how);
    }
    fmt::print("report     {}/report.md\n", s.report_dir.string());
    fmt::print("store      {} (hotpass leaderboard {}; hotpass show CANDIDATE)\n", options.store.string(), s.id);
    return 0;
}

// The store the read-only commands look at: it must exist (only a campaign creates one).
Result<std::unique_ptr<store::Store>> open_store(const std::string &path) {
    const std::filesystem::path file = path.empty() ? campaign::default_store_path() : std::filesystem::path(path);
    std::error_code code;
    if (!std::filesystem::is_regular_file(file, code)) {
        return error("no store at {} (`hotpass optimize` creates one; --store or $HOTPASS_STORE names another)", file.string());
    }
    return store::Store::open(file);
}

int run_campaigns(const std::string &store_path) {
    auto store = open_store(store_path);
    if (!store.ok()) return fmt::print(stderr, "error: {}\n", store.error()), 1;
    auto campaigns = (*store)->campaigns();
    if (!campaigns.ok()) return fmt::print(stderr, "error: {}\n", campaigns.error()), 1;
    fmt::print("{:>4} {:<9} {:>7} {:<22} {:<9} {:>10} {:<14} {}\n", "id", "status", "elapsed", "model", "tiers", "candidates", "incumbent", "traffic");
    for (const auto &c : *campaigns) {
        auto n = (*store)->count_candidates(c.id);
        if (!n.ok()) return fmt::print(stderr, "error: {}\n", n.error()), 1;
        fmt::print("{:>4} {:<9} {:>6.0f}s {:<22} {:<9} {:>10} {:<14} {}\n", c.id, c.status, c.elapsed_s, c.model, c.tiers, *n,
                   c.incumbent.substr(0, 12), c.traffic);
    }
    return 0;
}

int run_leaderboard(int64_t id, const std::string &store_path, int limit) {
    auto store = open_store(store_path);
    if (!store.ok()) return fmt::print(stderr, "error: {}\n", store.error()), 1;
    if (id == 0) {
        auto campaigns = (*store)->campaigns();
        if (!campaigns.ok() || campaigns->empty()) return fmt::print(stderr, "error: the store holds no campaign\n"), 1;
        id = campaigns->back().id;
    }
    auto campaign = (*store)->campaign(id);
    if (!campaign.ok()) return fmt::print(stderr, "error: {}\n", campaign.error()), 1;
    auto rows = campaign::leaderboard(**store, id);
    if (!rows.ok()) return fmt::print(stderr, "error: {}\n", rows.error()), 1;
    fmt::print("campaign {} ({}), incumbent {}; speedups are against the incumbent of their time\n", id, campaign->status,
               campaign->incumbent.substr(0, 12));
    fmt::print("{:<3} {:<14} {:<15} {:<5} {:<18} {:>8} {:>15}  {}\n", "#", "candidate", "agent", "tier", "verdict", "speedup", "95% CI", "knobs");
    int rank = 0;
    for (const auto &row : *rows) {
        if (++rank > limit) break;
        const std::string speedup = row.speedup > 0 ? fmt::format("{:.3f}x", row.speedup) : "-";
        const std::string ci = row.speedup > 0 ? fmt::format("{:.3f}-{:.3f}", row.ci_low, row.ci_high) : "";
        fmt::print("{:<3} {:<14} {:<15} {:<5} {:<18} {:>8} {:>15}  {}{}\n", rank, row.candidate.hash.substr(0, 12), row.candidate.agent,
                   row.tier, row.code, speedup, ci, row.candidate.knobs.dump(), row.candidate.hash == campaign->incumbent ? "  <- incumbent" : "");
    }
    return 0;
}

int run_show(const std::string &prefix, const std::string &store_path) {
    auto store = open_store(store_path);
    if (!store.ok()) return fmt::print(stderr, "error: {}\n", store.error()), 1;
    auto found = (*store)->find_candidates(prefix);
    if (!found.ok()) return fmt::print(stderr, "error: {}\n", found.error()), 1;
    if (found->empty()) return fmt::print(stderr, "error: no candidate {}\n", prefix), 1;
    const store::CandidateRecord &c = found->back();
    if (found->size() > 1) fmt::print("({} candidates match {}; showing the newest, campaign {})\n", found->size(), prefix, c.campaign_id);
    const store::ObjectStore objects((*store)->path().parent_path());
    fmt::print("candidate  {}\ncampaign   {}\nagent      {}\nparent     {}\nstate      {}\nnotes      {}\nknobs      {}\nsources    {}\n", c.hash,
               c.campaign_id, c.agent, c.parent, c.state, c.notes, c.knobs.dump(), objects.sources(c.source_hash).string());
    // Against its parent: knob changes, and a source diff when the sources differ.
    auto parents = (*store)->find_candidates(c.parent);
    const bool parent_known = parents.ok() && !parents->empty() && c.parent != "baseline";
    nlohmann::json parent_knobs = parent_known ? parents->front().knobs : nlohmann::json::object();
    fmt::print("\nchanges against {}:\n", c.parent);
    std::set<std::string> names;
    for (auto it = c.knobs.begin(); it != c.knobs.end(); ++it) names.insert(it.key());
    for (auto it = parent_knobs.begin(); it != parent_knobs.end(); ++it) names.insert(it.key());
    for (const std::string &name : names) {
        const std::string before = parent_knobs.contains(name) ? parent_knobs[name].get<std::string>() : "default";
        const std::string after = c.knobs.contains(name) ? c.knobs[name].get<std::string>() : "default";
        if (before != after) fmt::print("  {} {} -> {}\n", name, before, after);
    }
    if (parent_known && parents->front().source_hash != c.source_hash) {
        auto diff = run_process({"diff", "-ru", objects.sources(parents->front().source_hash).string(), objects.sources(c.source_hash).string()});
        if (diff.ok()) fmt::print("{}\n", diff->output);
    }
    const auto builds = (*store)->builds(c.id);
    if (builds.ok()) for (const auto &b : *builds) {
        fmt::print("\nbuild      {} {} ({:.1f} s{}) {}\n", b.ok ? "ok" : "FAILED", b.key.substr(0, 16), b.seconds, b.cached ? ", cached" : "",
                   b.ok ? b.artifact : b.failure);
        if (!b.ok) fmt::print("{}\n", b.diagnostics.substr(0, 3000));
    }
    fmt::print("\nverdicts\n");
    const auto verdicts = (*store)->verdicts(c.id);
    if (verdicts.ok()) for (const auto &v : *verdicts) fmt::print("  [{:>6.0f}s] {:<5} {}: {}\n", v.elapsed_s, v.tier, v.code, v.reason);
    const auto measurements = (*store)->measurements(c.id);
    if (measurements.ok()) for (const auto &m : *measurements) {
        fmt::print("\nmeasurement, {} tier, against {}: {:.3f}x (95% CI {:.3f}-{:.3f}){}\n", m.tier, m.incumbent.substr(0, 12), m.speedup,
                   m.ci_low, m.ci_high, m.significant ? ", significant" : "");
        fmt::print("  {:<34} {:>6} {:>12} {:>12} {:>9} {:>9}\n", "shape", "weight", "incumbent ms", "candidate ms", "speedup", "p");
        for (const auto &shape : m.shapes) {
            fmt::print("  {:<34} {:>6.2f} {:>12.3f} {:>12.3f} {:>8.3f}x {:>9.2g}\n", shape.value("name", ""), shape.value("weight", 0.0),
                       shape.value("incumbent_ms", 0.0), shape.value("candidate_ms", 0.0), shape.value("speedup", 0.0),
                       shape.value("p_value", 1.0));
        }
    }
    return 0;
}

}  // namespace

void add_campaign_commands(CLI::App &app, int &exit_code) {
    auto args = std::make_shared<OptimizeArgs>();
    auto *optimize = app.add_subcommand(
        "optimize",
        "Run a campaign: agents propose candidate forward passes, each is built, hot-loaded into a\n"
        "persistent executor, verified against the reference and timed on the traffic's batch shapes\n"
        "(fast tier: a few layers; slow tier: all layers); the best verified candidate wins.\n"
        "With nothing given: CPU, synthetic chat traffic, two knob-search agents, 3 minutes.\n"
        "Agents: knob-search (built in), command (any coding-agent CLI, run in its own workspace with\n"
        "TASK.md and `hotpass submit` on PATH), llm (an OpenAI-compatible chat endpoint from\n"
        "HOTPASS_LLM_BASE_URL / HOTPASS_LLM_MODEL / HOTPASS_LLM_API_KEY, or the OPENAI_* names).\n"
        "Examples: hotpass optimize --budget 20m --out campaign/\n"
        "          hotpass optimize --agents knob-search:1,command:1 --agent-command 'my-agent --yolo'\n"
        "          hotpass optimize --agents command:2 --agent-command 'agent-a --flag' --agent-command 'agent-b'\n"
        "          HOTPASS_LLM_BASE_URL=http://127.0.0.1:8000/v1 HOTPASS_LLM_MODEL=qwen hotpass optimize --agents llm:2");
    optimize->add_option("--model", args->model,
                         "checkpoint folder or preset:NAME; auto: preset:llama-300m for budgets of 15 minutes or more, else "
                         "preset:tiny-llama (CUDA: preset:llama-3.2-1b)")
        ->capture_default_str();
    optimize->add_option("--device", args->device,
                         "cpu, or cuda: executors on the GPU, candidates are forward/cuda/baseline's sources built by nvcc, "
                         "decode timed as CUDA graphs")
        ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
    optimize->add_option("--traffic", args->traffic, "synthetic preset (chat, code, long-context, agentic), a trace, a profile or a workload JSON")
        ->capture_default_str();
    optimize->add_option("--budget", args->budget, "time and/or candidates: 3m, 90s, 1h, 40, 20m,100 (default 3m)");
    optimize->add_option("--agents", args->agents,
                         "kinds and counts, comma-separated: knob-search:N (random and evolve), knob-random:N, knob-evolve:N, "
                         "command:N (runs --agent-command), llm:N (talks to the HOTPASS_LLM_* endpoint)")
        ->capture_default_str();
    optimize->add_option("--agent-command", args->agent_commands,
                         "command agents: the shell command line of one turn, run in the agent's workspace (cwd) with TASK.md, src/ "
                         "and `hotpass submit DIR` on PATH; repeatable: command agent i runs the (i mod n)-th of n lines, so "
                         "`--agents command:2 --agent-command 'agent-a' --agent-command 'agent-b'` runs one of each")
        ->allow_extra_args(false);
    optimize->add_option("--agent-turn-seconds", args->agent_turn_seconds,
                         "command agents: wall time of one turn; the command's process group is then killed")
        ->capture_default_str()->check(seconds());
    optimize->add_option("--agent-turns", args->agent_turns, "command and llm agents: turns (commands run / requests sent) before they retire")
        ->capture_default_str()->check(count(1, "turns"));
    optimize->add_option("--agent-env", args->agent_env, "command agents: extra KEY=VALUE in the command's environment (repeatable; stored for --resume)");
    optimize->add_option("--llm-url", args->llm_url, "llm agents: base URL, requests go to URL/chat/completions (default $HOTPASS_LLM_BASE_URL or $OPENAI_BASE_URL)");
    optimize->add_option("--llm-model", args->llm_model, "llm agents: model name (default $HOTPASS_LLM_MODEL or $OPENAI_MODEL)");
    optimize->add_option("--llm-max-tokens", args->llm_max_tokens, "llm agents: max_tokens of each reply")->capture_default_str()->check(count(1, "tokens"));
    optimize->add_option("--llm-timeout", args->llm_timeout, "llm agents: timeout of one request (to connect, and for the whole reply), seconds")->capture_default_str()->check(seconds());
    optimize->add_option("--tiers", args->tiers, "fast,slow (promote fast-tier wins to the slow tier) or slow (every candidate on all layers)")
        ->check(CLI::Validator(
            [](std::string &value) { return value == "fast,slow" || value == "slow" ? std::string() : "'" + value + "': fast,slow or slow"; },
            "fast,slow|slow"))
        ->capture_default_str();
    optimize->add_option("--resume", args->resume, "continue campaign ID (after a kill, a crash or Ctrl-C)");
    optimize->add_option("--out", args->out, "where winner/ and report.{md,json} and chart.svg go (default ./hotpass-campaign-ID)");
    optimize->add_option("--store", args->store, "campaign database (default $HOTPASS_STORE or ~/.local/share/hotpass/store.db)");
    optimize->add_option("--fast-layers", args->fast_layers, "layers served by the fast tier")->capture_default_str()->check(count(1, "layers"));
    optimize->add_option("--threads", args->n_thread, "executor threads")->capture_default_str()->check(count(1, "threads"));
    optimize->add_option("--seed", args->seed, "weight seed for presets")->capture_default_str();
    optimize->add_option("--agent-seed", args->agent_seed, "seed of the agents' searches (0: from the campaign)");
    optimize->add_option("--baseline-source", args->baseline_source, "the in-tree forward pass the knob search starts from");
    optimize->add_flag("--no-final", args->no_final, "skip timing the winner against the baseline at the end");
    optimize->add_option("--reference-tokens", args->reference_tokens,
                         "CPU: step tokens the plain reference runs per verification batch; the rest of a larger batch (a "
                         "workload shape's prefill chunk) is compared with the verified incumbent (0: the reference runs every batch whole; "
                         "CUDA always does, its reference is fast)")
        ->check(count(0, "tokens"))->capture_default_str();
    optimize->add_flag("--fresh-executor", args->fresh_executor, "restart the executor for every candidate (a benchmark control)");
    optimize->add_flag("--calibrate", args->calibrate,
                       "before the first candidate, time the incumbent against a second build of itself on each tier (an A/A run) "
                       "and raise the tier's minimum effect (1%) to the difference that run shows");
    optimize->callback([args, optimize, &exit_code] {
        args->model_given = optimize->count("--model") > 0;
        args->traffic_given = optimize->count("--traffic") > 0;
        exit_code = run_optimize(*args);
    });

    auto store_path = std::make_shared<std::string>();
    auto *campaigns = app.add_subcommand("campaigns", "List the campaigns in the store.");
    campaigns->add_option("--store", *store_path, "campaign database");
    campaigns->callback([store_path, &exit_code] { exit_code = run_campaigns(*store_path); });

    auto campaign_id = std::make_shared<int64_t>(0);
    auto limit = std::make_shared<int>(20);
    auto *board = app.add_subcommand("leaderboard", "Rank a campaign's candidates (default: the latest campaign).");
    board->add_option("campaign", *campaign_id, "campaign id");
    board->add_option("--store", *store_path, "campaign database");
    board->add_option("-n", *limit, "rows")->capture_default_str();
    board->callback([=, &exit_code] { exit_code = run_leaderboard(*campaign_id, *store_path, *limit); });

    auto prefix = std::make_shared<std::string>();
    auto *show = app.add_subcommand("show", "Show a candidate: its changes against its parent, builds, verdicts and measurements.");
    show->add_option("candidate", *prefix, "candidate hash or a prefix of it")->required();
    show->add_option("--store", *store_path, "campaign database");
    show->callback([=, &exit_code] { exit_code = run_show(*prefix, *store_path); });
}

}  // namespace hp::cli
