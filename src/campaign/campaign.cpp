#include "hotpass/campaign/campaign.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "hotpass/agents/command_agent.h"
#include "hotpass/backend/backend.h"
#include "hotpass/agents/knob_search_agent.h"
#include "hotpass/agents/llm_agent.h"
#include "hotpass/campaign/progress.h"
#include "hotpass/campaign/promotion.h"
#include "hotpass/campaign/report.h"
#include "hotpass/campaign/workload_shapes.h"
#include "hotpass/core/clock.h"
#include "hotpass/core/hash.h"
#include "hotpass/model/model.h"
#include "hotpass/store/objects.h"
#include "hotpass/store/store.h"
#include "hotpass/tune/evaluate.h"

namespace hp::campaign {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// --agent-command lines against the command agents of --agents: every command agent needs a line,
// every line an agent (agent i runs line i mod the number of lines), and no line is blank.
Status check_command_lines(const std::vector<std::string> &lines, int command_agents) {
    for (const std::string &line : lines) {
        if (line.find_first_not_of(" \t\n") == std::string::npos) return error("--agent-command: an empty command line");
    }
    if (command_agents > 0 && lines.empty()) {
        return error("--agents command:{} needs the command to run: --agent-command 'my-agent --flag'", command_agents);
    }
    if (command_agents == 0 && !lines.empty()) {
        return error("--agent-command is given but no command agent runs it: add command:N to --agents");
    }
    if (int(lines.size()) > command_agents) {
        return error("{} --agent-command lines for {} command agent{}: each line needs its own agent (--agents command:{})", lines.size(),
                     command_agents, command_agents == 1 ? "" : "s", lines.size());
    }
    return {};
}

std::string hardware_description(const std::string &device, int n_thread) {
    if (device == "cuda") {  // the context is created and destroyed here, before any executor is forked
        auto cuda = backend::create_backend(backend::DeviceKind::cuda);
        if (!cuda.ok()) return "cuda: " + cuda.error();
        const backend::DeviceInfo &info = (*cuda)->info();
        return fmt::format("cuda: {} ({} SMs, {:.0f} GB, sm_{})", info.name, info.n_sm, double(info.memory_bytes) / 1e9, info.compute_capability);
    }
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("model name", 0) == 0) {
            model = line.substr(line.find(':') + 2);
            break;
        }
    }
    return fmt::format("cpu: {} ({} hardware threads, executor threads {})", model, std::thread::hardware_concurrency(), n_thread);
}

json options_to_json(const CampaignOptions &o) {
    return {{"model", o.model}, {"seed", o.seed}, {"traffic", o.traffic}, {"two_tiers", o.two_tiers}, {"fast_layers", o.fast_layers},
            {"n_thread", o.n_thread}, {"device", o.device}, {"fast_seconds_per_shape", o.fast_seconds_per_shape},
            {"slow_seconds_per_shape", o.slow_seconds_per_shape}, {"fast_cases", o.fast_cases}, {"slow_cases", o.slow_cases}, {"reference_tokens", o.reference_tokens}, {"fresh_executor", o.fresh_executor}, {"calibrate", o.calibrate},
            {"baseline_source", o.baseline_source.string()}, {"baseline_plugin", o.baseline_plugin}, {"agent_seed", o.agent_seed},
            {"agents", [&] {
                 json agents = json::array();
                 for (const AgentSpec &a : o.agents) agents.push_back({{"kind", a.kind}, {"count", a.count}});
                 return agents;
             }()},
            {"command", {{"commands", o.command_lines}, {"turn_seconds", o.command.turn_seconds}, {"max_turns", o.command.max_turns},
                         {"env", o.command.env}}},
            // No API key: a resumed campaign reads it from the environment again.
            {"llm", {{"base_url", o.llm.base_url}, {"model", o.llm.model}, {"max_tokens", o.llm.max_tokens}, {"max_turns", o.llm.max_turns},
                     {"timeout_seconds", o.llm.timeout_seconds}}},
            {"workspaces", o.workspaces.string()}};
}

// A resumed campaign runs with the options it was started with (its budget may be given anew).
void restore_options(CampaignOptions &o, const json &j) {
    o.model = j.value("model", o.model);
    o.seed = j.value("seed", o.seed);
    o.traffic = j.value("traffic", o.traffic);
    o.two_tiers = j.value("two_tiers", o.two_tiers);
    o.fast_layers = j.value("fast_layers", o.fast_layers);
    o.n_thread = j.value("n_thread", o.n_thread);
    o.device = j.value("device", o.device);
    o.fast_seconds_per_shape = j.value("fast_seconds_per_shape", o.fast_seconds_per_shape);
    o.slow_seconds_per_shape = j.value("slow_seconds_per_shape", o.slow_seconds_per_shape);
    o.fast_cases = j.value("fast_cases", o.fast_cases);
    o.slow_cases = j.value("slow_cases", o.slow_cases);
    o.reference_tokens = j.value("reference_tokens", 0);  // campaigns from before the option checked whole batches
    o.fresh_executor = j.value("fresh_executor", o.fresh_executor);
    o.calibrate = j.value("calibrate", o.calibrate);
    o.baseline_source = j.value("baseline_source", o.baseline_source.string());
    o.baseline_plugin = j.value("baseline_plugin", o.baseline_plugin);
    o.agent_seed = j.value("agent_seed", o.agent_seed);
    if (j.contains("agents")) {
        o.agents.clear();
        for (const json &a : j["agents"]) o.agents.push_back({a.value("kind", ""), a.value("count", 1)});
    }
    if (j.contains("command") && j["command"].is_object()) {
        const json &c = j["command"];
        if (c.contains("commands") && c["commands"].is_array()) {
            o.command_lines = c["commands"].get<std::vector<std::string>>();
        } else if (!c.value("command", std::string()).empty()) {  // campaigns stored with one command line
            o.command_lines = {c["command"].get<std::string>()};
        }
        // Those could store a line that no agent ran (it was not checked then): it is not refused on resume.
        if (std::none_of(o.agents.begin(), o.agents.end(), [](const AgentSpec &a) { return a.kind == "command"; })) o.command_lines.clear();
        o.command.turn_seconds = c.value("turn_seconds", o.command.turn_seconds);
        o.command.max_turns = c.value("max_turns", o.command.max_turns);
        o.command.env = c.value("env", o.command.env);
    }
    if (j.contains("llm") && j["llm"].is_object()) {
        const json &l = j["llm"];
        o.llm.base_url = l.value("base_url", o.llm.base_url);
        o.llm.model = l.value("model", o.llm.model);
        o.llm.max_tokens = l.value("max_tokens", o.llm.max_tokens);
        o.llm.max_turns = l.value("max_turns", o.llm.max_turns);
        o.llm.timeout_seconds = l.value("timeout_seconds", o.llm.timeout_seconds);
    }
    o.workspaces = j.value("workspaces", o.workspaces.string());
}

agents::Knobs knobs_of(const json &knobs) {
    agents::Knobs out;
    for (auto it = knobs.begin(); it != knobs.end(); ++it) out[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    return out;
}

// The campaign is also the agents' Submissions: command and llm agents submit while they work.
class CampaignRun : public agents::Submissions {
public:
    CampaignRun(CampaignOptions options, std::unique_ptr<store::Store> store, const std::atomic<bool> *stop)
        : options_(std::move(options)), store_(std::move(store)), objects_(store_->path().parent_path()), stop_(stop) {}

    Result<CampaignSummary> run();

    Result<std::string> submit(const std::string &agent, const agents::Proposal &proposal) override;
    std::optional<agents::ResultSummary> result(const std::string &hash) override;
    bool stopping() override { return stopping_ || !budget_left(); }
    double elapsed_seconds() override { return elapsed(); }

private:
    Status make_agents();
    // Stores a proposal's sources and queues it; the candidate's hash, and whether it is new.
    Result<std::pair<std::string, bool>> enqueue(const std::string &agent, const agents::Proposal &proposal);
    tune::EvaluateOptions device_options() const;  // build flags and tolerances of the device
    tune::EvaluateOptions tier_options(bool slow_tier) const;
    std::vector<tune::GreedyPrompt> replay_prompts() const;
    Status setup();
    Status restore_state();
    void agent_loop(size_t index);
    void builder_loop();
    void evaluate(int64_t candidate_id, bool slow_tier);
    void promote_to_incumbent(const store::CandidateRecord &record, double speedup, const std::string &artifact);
    void final_check();
    void calibrate();
    tune::Candidate to_candidate(const store::CandidateRecord &record) const;
    agents::AgentContext context();
    // `repeat`: a confirmation run (repeat-before-promote), not a new evaluation for the counters and the budget.
    void record_result(const store::CandidateRecord &record, const std::string &tier, const tune::Evaluation &evaluation,
                       bool repeat = false);
    double elapsed() const { return base_elapsed_ + (now_seconds() - start_); }
    bool budget_left() const;
    void note(const std::string &agent, const std::string &candidate, const std::string &text);
    std::unique_ptr<tune::Supervisor> make_supervisor(bool slow_tier, const std::string &incumbent, const std::string &name) const;
    // Each executor's socket and log folder (fast, slow, final): both name their sockets executor-<n>.sock.
    fs::path executor_dir(const std::string &name) const {
        return fs::temp_directory_path() / fmt::format("hotpass-campaign-{}-{}-{}", campaign_.id, getpid(), name);
    }
    ProgressState progress_state();

    CampaignOptions options_;
    std::unique_ptr<store::Store> store_;
    store::ObjectStore objects_;
    const std::atomic<bool> *stop_;
    store::CampaignRecord campaign_;
    CampaignTraffic traffic_;
    agents::KnobManifest manifest_;
    std::string source_hash_;
    tune::BuildOptions build_options_;
    std::vector<std::unique_ptr<agents::Agent>> agents_;
    std::unique_ptr<tune::Supervisor> fast_, slow_;
    std::unique_ptr<Progress> progress_;

    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<bool> stopping_{false};
    int n_agents_running_ = 0;  // agent threads that have not retired
    bool building_ = false;     // the builder holds a candidate taken off the build queue
    std::deque<int64_t> build_queue_, ready_queue_, slow_queue_;
    std::vector<agents::ResultSummary> results_;
    std::set<std::string> known_;
    agents::Knobs incumbent_knobs_;
    double best_speedup_ = 1;  // product of the incumbent changes' slow-tier speedups
    // The minimum effect each tier's timing asks of a win: RunnerOptions' default, or what the A/A
    // calibration showed (options_.calibrate). Set before the first evaluation, on the main thread.
    double min_effect_fast_ = tune::RunnerOptions{}.min_effect, min_effect_slow_ = tune::RunnerOptions{}.min_effect;
    int n_first_tier_ = 0;     // candidates with a first-tier (or build) verdict: the candidate budget
    int n_built_ = 0, n_build_failed_ = 0, n_verified_ = 0, n_fast_ = 0, n_slow_ = 0, n_promoted_ = 0, n_lost_ = 0;
    int executor_starts_ = 0;
    double base_elapsed_ = 0, start_ = 0, last_saved_ = 0;
};

tune::Candidate CampaignRun::to_candidate(const store::CandidateRecord &record) const {
    tune::Candidate candidate;
    candidate.dir = objects_.sources(record.source_hash);
    candidate.parent = record.parent;
    candidate.agent = record.agent;
    candidate.knobs = knobs_of(record.knobs);
    candidate.notes = record.notes;
    return candidate;
}

std::unique_ptr<tune::Supervisor> CampaignRun::make_supervisor(bool slow_tier, const std::string &incumbent, const std::string &name) const {
    tune::ExecutorLaunch launch;
    launch.model = options_.model;
    launch.seed = options_.seed;
    launch.n_layer = slow_tier ? 0 : options_.fast_layers;
    launch.incumbent = incumbent;
    launch.n_thread = options_.n_thread;
    launch.device = options_.device;
    launch.work_dir = executor_dir(name);
    return std::make_unique<tune::Supervisor>(launch);
}

Status CampaignRun::setup() {
    if (options_.resume) {
        auto campaign = store_->campaign(options_.resume);
        if (!campaign.ok()) return Error{campaign.error()};
        campaign_ = *campaign;
        if (campaign_.status == "finished") return error("campaign {} already finished; start a new one", campaign_.id);
        restore_options(options_, campaign_.options);
        if (!options_.budget_given) {
            options_.budget.seconds = campaign_.budget.value("seconds", 0.0);
            options_.budget.candidates = campaign_.budget.value("candidates", 0);
        }
        base_elapsed_ = campaign_.elapsed_s;
    }
    // Agent configuration errors come before anything is written to the store.
    int command_agents = 0;
    for (const AgentSpec &spec : options_.agents) {
        if (spec.kind == "command") command_agents += spec.count;
        if (spec.kind == "llm") HP_TRY(agents::validate_llm_config(options_.llm));
    }
    HP_TRY(check_command_lines(options_.command_lines, command_agents));
    if (options_.device != "cpu" && options_.device != "cuda") return error("unknown device '{}': cpu or cuda", options_.device);
    // So is the model: a typo would otherwise spend the budget restarting executors that cannot load it.
    if (Status model = model::check_model_spec(options_.model); !model.ok()) return error("--model {}: {}", options_.model, model.error());
    if (!options_.out.empty()) HP_TRY(check_report_dir(options_.out));
    if (options_.baseline_source.empty()) options_.baseline_source = default_baseline_source(options_.device);
    auto manifest = agents::load_knob_manifest(options_.baseline_source / "knobs.json");
    if (!manifest.ok()) return Error{manifest.error()};
    manifest_ = *manifest;
    auto source_hash = objects_.put_sources(options_.baseline_source);
    if (!source_hash.ok()) return Error{source_hash.error()};
    source_hash_ = *source_hash;
    auto traffic = load_campaign_traffic(options_.traffic);
    if (!traffic.ok()) return Error{traffic.error()};
    traffic_ = std::move(traffic).value();

    if (options_.device == "cuda") build_options_ = tune::cuda_build_options();
    build_options_.cache_dir = objects_.artifacts();
    build_options_.include_dir = tune::default_include_dir();

    if (!options_.resume) {
        store::ProfileRecord profile;
        profile.source = options_.traffic;
        profile.profile = traffic_.profile;
        profile.workload = {{"fast", tune::shapes_to_json(traffic_.fast_shapes)["shapes"]},
                            {"slow", tune::shapes_to_json(traffic_.slow_shapes)["shapes"]}};
        profile.hash = hash_hex(profile.profile.dump() + profile.workload.dump());
        auto profile_id = store_->add_profile(profile);
        if (!profile_id.ok()) return Error{profile_id.error()};
        campaign_.model = options_.model;
        campaign_.hardware = hardware_description(options_.device, options_.n_thread);
        campaign_.traffic = options_.traffic;
        campaign_.profile_id = *profile_id;
        campaign_.tiers = options_.two_tiers ? "fast,slow" : "slow";
        campaign_.budget = {{"seconds", options_.budget.seconds}, {"candidates", options_.budget.candidates}};
        campaign_.options = options_to_json(options_);
        campaign_.status = "running";
        campaign_.incumbent = "baseline";
        campaign_.incumbent_artifact = options_.baseline_plugin;
        auto id = store_->add_campaign(campaign_);
        if (!id.ok()) return Error{id.error()};
        campaign_.id = *id;
    } else {
        HP_TRY(store_->set_campaign_status(campaign_.id, "running"));
    }
    HP_TRY(store_->set_elapsed(campaign_.id, base_elapsed_));
    HP_TRY(restore_state());

    HP_TRY(make_agents());
    fast_ = make_supervisor(false, campaign_.incumbent_artifact, "fast");
    slow_ = make_supervisor(true, campaign_.incumbent_artifact, "slow");
    return {};
}

Status CampaignRun::make_agents() {
    const uint64_t seed = options_.agent_seed ? options_.agent_seed : splitmix64(uint64_t(campaign_.id) * 1000003u + uint64_t(base_elapsed_));
    const fs::path workspaces = (options_.workspaces.empty() ? store_->path().parent_path() / "workspaces" : options_.workspaces) /
                                fmt::format("campaign-{}", campaign_.id);
    // What a command agent must leave alone: the sources every candidate starts from.
    const std::vector<fs::path> protected_dirs = {objects_.sources(source_hash_), options_.baseline_source};
    size_t command_agents = 0;
    for (const AgentSpec &spec : options_.agents) {
        for (int i = 0; i < spec.count; ++i) {
            const std::string name = fmt::format("{}-{}", spec.kind, i + 1);
            if (spec.kind == "command") {
                agents::CommandAgentConfig config = options_.command;
                config.command = options_.command_lines[command_agents++ % options_.command_lines.size()];
                config.device = options_.device;
                std::error_code code;
                const fs::path exe = fs::read_symlink("/proc/self/exe", code);
                if (config.hotpass_binary.empty() && !code && exe.filename() == "hotpass") config.hotpass_binary = exe;
                agents_.push_back(std::make_unique<agents::CommandAgent>(name, config, objects_.sources(source_hash_), workspaces / name,
                                                                         protected_dirs));
            } else if (spec.kind == "llm") {
                agents::LlmConfig config = options_.llm;
                config.device = options_.device;
                agents_.push_back(std::make_unique<agents::LlmAgent>(name, config, objects_.sources(source_hash_), workspaces / name,
                                                                     store_.get(), campaign_.id));
            } else if (spec.kind == "knob-random" || spec.kind == "knob-evolve") {
                const auto strategy = spec.kind == "knob-evolve" ? agents::KnobStrategy::evolve : agents::KnobStrategy::random;
                agents_.push_back(std::make_unique<agents::KnobSearchAgent>(name, strategy, manifest_, objects_.sources(source_hash_), source_hash_,
                                                                            splitmix64(seed + agents_.size())));
            } else {
                return error("unknown agent kind '{}'", spec.kind);
            }
        }
    }
    return {};
}

// Rebuilds the queues, the population and the counters from the store (a new campaign has none).
// Candidates that were being evaluated when the process died are the only ones lost.
Status CampaignRun::restore_state() {
    for (const char *state : {"evaluating", "evaluating_slow"}) {
        auto in_flight = store_->candidates(campaign_.id, state);
        if (!in_flight.ok()) return Error{in_flight.error()};
        for (const auto &record : *in_flight) {
            HP_TRY(store_->add_verdict({record.id, state == std::string("evaluating") && options_.two_tiers ? "fast" : "slow", "lost",
                                        "in flight when the campaign process stopped; not re-run (it may be what killed it)", 0, 0,
                                        base_elapsed_}));
        }
    }
    HP_TRY(store_->mark_in_flight_lost(campaign_.id));
    auto all = store_->candidates(campaign_.id);
    auto verdicts = store_->campaign_verdicts(campaign_.id);
    auto measurements = store_->campaign_measurements(campaign_.id);
    auto promotions = store_->promotions(campaign_.id);
    if (!all.ok() || !verdicts.ok() || !measurements.ok() || !promotions.ok()) return error("cannot read campaign {} back", campaign_.id);
    std::map<int64_t, const store::CandidateRecord *> by_id;
    for (const auto &record : *all) {
        by_id[record.id] = &record;
        known_.insert(record.hash);
        if (record.state == "queued" || record.state == "built") build_queue_.push_back(record.id);
        else if (record.state == "promoted") slow_queue_.push_back(record.id);
        else if (record.state == "lost") ++n_lost_;
        if (record.hash == campaign_.incumbent) incumbent_knobs_ = knobs_of(record.knobs);
    }
    const std::string first_tier = options_.two_tiers ? "fast" : "slow";
    std::map<int64_t, agents::ResultSummary> summaries;
    std::set<std::pair<int64_t, std::string>> seen;  // (candidate, tier): a repeated slow-tier run is not a new evaluation
    for (const auto &verdict : *verdicts) {
        if (verdict.code == "lost") continue;
        const bool first_of_tier = seen.insert({verdict.candidate_id, verdict.tier}).second;
        if (first_of_tier && (verdict.tier == "build" || verdict.tier == first_tier)) ++n_first_tier_;
        if (verdict.tier == "build") ++n_build_failed_;
        else if (first_of_tier && (verdict.tier == "fast" || verdict.tier == "slow")) ++n_built_;
        if (first_of_tier && (verdict.code == "faster" || verdict.code == "not_faster")) ++n_verified_;
        if (verdict.tier == "fast") ++n_fast_;
        if (verdict.tier == "slow") ++n_slow_;
        const auto *record = by_id[verdict.candidate_id];
        if (!record || verdict.tier == "final") continue;
        auto &summary = summaries[verdict.candidate_id];
        summary = {record->hash, record->agent, record->parent, knobs_of(record->knobs), verdict.tier, verdict.code, 0, false, verdict.reason};
    }
    for (const auto &m : *measurements) {
        auto found = summaries.find(m.candidate_id);
        if (found != summaries.end() && found->second.tier == m.tier) {
            found->second.speedup = m.speedup;
            found->second.significant = m.significant;
        }
    }
    for (auto &[id, summary] : summaries) results_.push_back(std::move(summary));
    for (const auto &promotion : *promotions) {
        if (promotion.to_tier == "slow") ++n_promoted_;
        if (promotion.to_tier == "incumbent") best_speedup_ *= promotion.speedup;
    }
    return {};
}

agents::AgentContext CampaignRun::context() {
    agents::AgentContext context;
    {
        std::lock_guard lock(mutex_);
        context.incumbent = campaign_.incumbent;
        context.incumbent_knobs = incumbent_knobs_;
        context.results = results_;
        context.known = known_;
    }
    auto notes = store_->notes(campaign_.id, 50);
    if (notes.ok()) context.notes = *notes;
    context.submissions = this;
    return context;
}

Result<std::pair<std::string, bool>> CampaignRun::enqueue(const std::string &agent, const agents::Proposal &proposal) {
    auto source_hash = objects_.put_sources(proposal.source_dir);
    if (!source_hash.ok()) return error("cannot store its sources: {}", source_hash.error());
    store::CandidateRecord record;
    record.campaign_id = campaign_.id;
    record.hash = store::candidate_hash(*source_hash, proposal.knobs);
    record.parent = proposal.parent;
    record.agent = agent;
    record.knobs = proposal.knobs;
    record.notes = proposal.notes;
    record.source_hash = *source_hash;
    record.state = "queued";
    record.elapsed_s = elapsed();
    auto id = store_->add_candidate(record);
    if (!id.ok()) return error("cannot record the candidate: {}", id.error());
    std::lock_guard lock(mutex_);
    known_.insert(record.hash);
    if (!*id) return std::pair{record.hash, false};
    build_queue_.push_back(**id);
    wake_.notify_all();
    return std::pair{record.hash, true};
}

Result<std::string> CampaignRun::submit(const std::string &agent, const agents::Proposal &proposal) {
    if (stopping()) return error("the campaign is ending");
    {
        std::lock_guard lock(mutex_);
        if (options_.budget.candidates > 0 && int(known_.size()) - n_lost_ >= options_.budget.candidates) {
            return error("the campaign's candidate budget ({}) is spent", options_.budget.candidates);
        }
    }
    auto queued = enqueue(agent, proposal);
    if (!queued.ok()) return Error{queued.error()};
    const auto &[hash, added] = *queued;
    if (!added && !result(hash)) {
        // Proposed before: its verdict comes when it is evaluated, unless that candidate was lost.
        auto found = store_->find_candidates(hash);
        if (found.ok()) {
            for (const auto &record : *found) {
                if (record.campaign_id == campaign_.id && (record.state == "lost" || record.state == "done")) {
                    return error("an identical candidate was proposed before and ended {} without a verdict to report", record.state);
                }
            }
        }
    }
    if (progress_) progress_->event(fmt::format("{} submitted {}{}", agent, hash.substr(0, 12), added ? "" : " (proposed before)"));
    return hash;
}

std::optional<agents::ResultSummary> CampaignRun::result(const std::string &hash) {
    std::lock_guard lock(mutex_);
    for (auto it = results_.rbegin(); it != results_.rend(); ++it) {
        if (it->hash == hash) return *it;
    }
    return std::nullopt;
}

void CampaignRun::note(const std::string &agent, const std::string &candidate, const std::string &text) {
    (void)store_->add_note({campaign_.id, agent, candidate, text, elapsed()});
}

bool CampaignRun::budget_left() const {
    if (stop_ && stop_->load()) return false;
    if (options_.budget.seconds > 0 && elapsed() >= options_.budget.seconds) return false;
    return true;
}

// One agent's thread: keep a few candidates queued ahead of the builder and the executors.
void CampaignRun::agent_loop(size_t index) {
    agents::Agent &agent = *agents_[index];
    struct Retire {
        CampaignRun &run;
        ~Retire() {
            std::lock_guard lock(run.mutex_);
            --run.n_agents_running_;
            run.wake_.notify_all();
        }
    } retire{*this};
    double backoff = 0.5;
    size_t seen = 0;
    while (!stopping_) {
        {
            std::unique_lock lock(mutex_);
            const size_t pending = build_queue_.size() + ready_queue_.size();
            const bool enough_candidates = options_.budget.candidates > 0 &&
                                           int(known_.size()) - n_lost_ >= options_.budget.candidates;
            if (pending >= 2 + agents_.size() / 2 || enough_candidates) {
                wake_.wait_for(lock, std::chrono::milliseconds(200));
                continue;
            }
        }
        agents::AgentContext context = this->context();
        for (; seen < context.results.size(); ++seen) agent.observe(context.results[seen]);
        agents::ProposeOutcome outcome;
        try {
            outcome = agent.propose(context);
        } catch (const std::exception &failure) {
            outcome.reason = fmt::format("the agent threw: {}", failure.what());
        }
        if (!outcome.proposal) {
            // A turn that submitted candidates (command, llm) worked; anything else is a failure to back off from.
            const bool worked = outcome.n_submitted > 0;
            note(agent.name(), "", worked ? outcome.reason : fmt::format("no proposal: {}", outcome.reason));
            if (outcome.exhausted) {
                if (progress_) progress_->event(fmt::format("agent {} stops: {}", agent.name(), outcome.reason.substr(0, 300)));
                return;
            }
            if (worked) {
                backoff = 0.5;
                continue;
            }
            const double wait = outcome.retry_after_seconds > 0 ? outcome.retry_after_seconds : backoff;
            if (outcome.retry_after_seconds <= 0) backoff = std::min(backoff * 2, 30.0);
            std::unique_lock lock(mutex_);
            wake_.wait_for(lock, std::chrono::duration<double>(wait), [&] { return stopping_.load(); });
            continue;
        }
        backoff = 0.5;
        auto queued = enqueue(agent.name(), *outcome.proposal);
        if (!queued.ok()) note(agent.name(), "", queued.error());
    }
}

// Builds queued candidates ahead of the executors; a build failure is a verdict, recorded here.
void CampaignRun::builder_loop() {
    while (!stopping_) {
        int64_t id = 0;
        {
            std::unique_lock lock(mutex_);
            wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || !build_queue_.empty(); });
            if (stopping_ || build_queue_.empty()) continue;
            id = build_queue_.front();
            build_queue_.pop_front();
            building_ = true;
        }
        struct Built {
            CampaignRun &run;
            ~Built() {
                std::lock_guard lock(run.mutex_);
                run.building_ = false;
            }
        } built{*this};
        auto record = store_->candidate(id);
        if (!record.ok()) continue;
        const tune::BuildOutcome build = tune::build_candidate(to_candidate(*record), build_options_);
        (void)store_->add_build({id, build.artifact.key, build.ok, build.artifact.cached, build.artifact.build_seconds, build.failure,
                                 build.diagnostics.substr(0, 20000), build.artifact.path.string()});
        if (build.ok) {
            (void)store_->set_candidate_state(id, "built");
            std::lock_guard lock(mutex_);
            ready_queue_.push_back(id);
            wake_.notify_all();
            continue;
        }
        const std::string code = build.failure == "bad exports" ? "bad_exports" : "build_failed";
        const std::string reason = fmt::format("{}: {}", build.failure, build.diagnostics.substr(0, 2000));
        (void)store_->add_verdict({id, "build", code, reason, 0, 0, elapsed()});
        (void)store_->set_candidate_state(id, "done");
        {
            std::lock_guard lock(mutex_);
            ++n_build_failed_;
            ++n_first_tier_;
            results_.push_back({record->hash, record->agent, record->parent, knobs_of(record->knobs), "build", code, 0, false, reason});
        }
        // Not under mutex_: the progress line reads the counters through progress_state(), which takes it.
        if (progress_) progress_->event(fmt::format("build {} {} {}: {}", record->hash.substr(0, 12), record->agent, code, build.failure));
    }
}

void CampaignRun::record_result(const store::CandidateRecord &record, const std::string &tier, const tune::Evaluation &evaluation,
                                bool repeat) {
    (void)store_->add_verdict({record.id, tier, evaluation.verdict.code, evaluation.verdict.reason, evaluation.hot_swap_seconds,
                               evaluation.executor_starts, elapsed()});
    if (evaluation.measurement) {
        const tune::Measurement &m = *evaluation.measurement;
        (void)store_->add_measurement({record.id, tier, tier == "final" ? std::string("baseline") : campaign_.incumbent, m.speedup,
                                       m.speedup_ci.low, m.speedup_ci.high, m.significant, m.weighted_incumbent_ms,
                                       m.weighted_candidate_ms, tune::measurement_to_json(m)["shapes"], elapsed()});
    }
    if (tier == "final") return;
    std::lock_guard lock(mutex_);
    executor_starts_ += evaluation.executor_starts;
    if (tier == "fast") ++n_fast_;
    else ++n_slow_;
    if (repeat) return;  // the first slow-tier result stays the population's; the decision is taken by the caller
    ++n_built_;
    if (evaluation.verdict.correct()) ++n_verified_;
    if (tier == (options_.two_tiers ? "fast" : "slow")) ++n_first_tier_;
    agents::ResultSummary summary{record.hash, record.agent, record.parent, knobs_of(record.knobs), tier, evaluation.verdict.code,
                                  evaluation.measurement ? evaluation.measurement->speedup : 0.0,
                                  evaluation.measurement && evaluation.measurement->significant, evaluation.verdict.reason};
    auto same = std::find_if(results_.begin(), results_.end(), [&](const auto &r) { return r.hash == record.hash; });
    if (same != results_.end()) *same = summary;
    else results_.push_back(summary);
}

tune::EvaluateOptions CampaignRun::device_options() const {
    tune::EvaluateOptions eval;
    eval.build = build_options_;
    // bf16 compute against the float32 GPU reference (docs/cuda.md); the CPU keeps the defaults.
    if (options_.device == "cuda") eval.tolerance = {3e-2, 3e-2};
    // The CPU reference is single-threaded float32: a workload shape's 500-token prefill chunk
    // took about a minute through it on llama-300m. The GPU reference is fast enough to run whole.
    eval.reference_tokens = options_.device == "cuda" ? 0 : options_.reference_tokens;
    return eval;
}

// The slow tier's greedy decode starts from one of the traffic's sampled requests.
std::vector<tune::GreedyPrompt> CampaignRun::replay_prompts() const {
    std::vector<tune::GreedyPrompt> prompts;
    for (const traffic::Request &request : traffic_.slow.requests) {
        if (request.input_tokens > 0) prompts.push_back({int(request.input_tokens), request.token_ids});
    }
    return prompts;
}

tune::EvaluateOptions CampaignRun::tier_options(bool slow_tier) const {
    tune::EvaluateOptions eval = device_options();
    eval.shapes = slow_tier ? traffic_.slow_shapes : traffic_.fast_shapes;
    eval.n_case = slow_tier ? options_.slow_cases : options_.fast_cases;
    eval.greedy_steps = slow_tier ? 16 : 8;
    if (slow_tier) eval.greedy_prompts = replay_prompts();
    eval.runner.target_seconds = slow_tier ? options_.slow_seconds_per_shape : options_.fast_seconds_per_shape;
    eval.runner.min_rep = slow_tier ? 15 : 10;
    eval.runner.max_seconds = slow_tier ? 40 : 20;  // long prefill steps on a CPU: at least kMinRepCapped pairs, then stop
    eval.runner.min_effect = slow_tier ? min_effect_slow_ : min_effect_fast_;
    // Generous: a hang is still a hang, it is only called later. With --reference-tokens 0 the
    // plain reference runs every shape of the tier whole (a minute per 500-token chunk on llama-300m).
    eval.verify_deadline_seconds = slow_tier ? 900 : 300;
    return eval;
}

void CampaignRun::evaluate(int64_t id, bool slow_tier) {
    auto record = store_->candidate(id);
    if (!record.ok()) return;
    const std::string tier = slow_tier ? "slow" : "fast";
    (void)store_->set_candidate_state(id, slow_tier ? "evaluating_slow" : "evaluating");
    tune::Supervisor &supervisor = slow_tier ? *slow_ : *fast_;
    const tune::Evaluation evaluation = tune::evaluate_candidate(supervisor, to_candidate(*record), tier_options(slow_tier));
    if (options_.fresh_executor) supervisor.stop();
    record_result(*record, tier, evaluation);
    std::string outcome;
    const bool won = evaluation.verdict.faster();
    if (won && !slow_tier && options_.two_tiers) {
        (void)store_->add_promotion({campaign_.id, id, "fast", "slow", evaluation.measurement->speedup, elapsed()});
        (void)store_->set_candidate_state(id, "promoted");
        std::lock_guard lock(mutex_);
        ++n_promoted_;
        slow_queue_.push_back(id);
        outcome = " -> promoted to the slow tier";
    } else if (won) {
        // Repeat-before-promote: independent slow-tier runs (fresh ABAB timing each) must all say faster.
        std::vector<SlowRun> runs = {{evaluation.verdict.code, evaluation.measurement->speedup}};
        SlowTierOutcome decision = decide_slow_tier(runs);
        std::string artifact = evaluation.build.artifact.path.string();
        while (decision.decision == SlowTierDecision::run_again && budget_left()) {
            if (progress_) progress_->event(fmt::format("slow {} {} {}: {}", record->hash.substr(0, 12), record->agent, evaluation.verdict.code, decision.reason));
            const tune::Evaluation again = tune::evaluate_candidate(*slow_, to_candidate(*record), tier_options(true));
            if (options_.fresh_executor) slow_->stop();
            record_result(*record, "slow", again, true);
            runs.push_back({again.verdict.code, again.measurement ? again.measurement->speedup : 0.0});
            artifact = again.build.artifact.path.string();
            decision = decide_slow_tier(runs);
        }
        if (decision.decision == SlowTierDecision::promote) {
            promote_to_incumbent(*record, decision.speedup, artifact);
            outcome = fmt::format(" -> new incumbent ({})", decision.reason);
        } else {
            const std::string why = decision.decision == SlowTierDecision::reject ? decision.reason : "the budget ended before the repeat run";
            note("campaign", record->hash, fmt::format("{} not promoted: {}", record->hash.substr(0, 12), why));
            outcome = fmt::format(" -> not confirmed ({})", why);
        }
        (void)store_->set_candidate_state(id, "done");
    } else {
        (void)store_->set_candidate_state(id, "done");
    }
    if (progress_) {
        std::string figures;
        if (evaluation.measurement) {
            const auto &m = *evaluation.measurement;
            figures = fmt::format(" {:.3f}x (CI {:.3f}-{:.3f})", m.speedup, m.speedup_ci.low, m.speedup_ci.high);
        }
        progress_->event(fmt::format("{} {} {} {}{}{}", tier, record->hash.substr(0, 12), record->agent, evaluation.verdict.code, figures,
                                     outcome));
    }
}

void CampaignRun::promote_to_incumbent(const store::CandidateRecord &record, double speedup, const std::string &artifact) {
    (void)store_->add_promotion({campaign_.id, record.id, "slow", "incumbent", speedup, elapsed()});
    (void)store_->set_incumbent(campaign_.id, record.hash, artifact);
    note("campaign", record.hash,
         fmt::format("new incumbent {} ({}): {:.3f}x the previous one on the slow tier (the smaller of {} runs); knobs {}",
                     record.hash.substr(0, 12), record.agent, speedup, kSlowRunsToPromote, record.knobs.dump()));
    {
        std::lock_guard lock(mutex_);
        campaign_.incumbent = record.hash;
        campaign_.incumbent_artifact = artifact;
        incumbent_knobs_ = knobs_of(record.knobs);
        best_speedup_ *= speedup;
    }
    // Candidates from now on are timed against the new incumbent: restart both executors with it.
    fast_ = make_supervisor(false, artifact, "fast");
    slow_ = make_supervisor(true, artifact, "slow");
}

// The headline figure: the winner against the default-knob baseline, on the slow tier.
void CampaignRun::final_check() {
    if (campaign_.incumbent == "baseline" || !options_.final_check) return;
    auto found = store_->find_candidates(campaign_.incumbent);
    if (!found.ok() || found->empty()) return;
    const store::CandidateRecord &record = found->front();
    if (progress_) progress_->event(fmt::format("final: timing the winner {} against the baseline (slow tier)", record.hash.substr(0, 12)));
    fast_.reset();
    slow_.reset();
    auto supervisor = make_supervisor(true, options_.baseline_plugin, "final");
    tune::EvaluateOptions eval = device_options();
    eval.verify_deadline_seconds = 900;  // as the slow tier's
    eval.shapes = traffic_.slow_shapes;
    eval.n_case = options_.slow_cases;
    eval.greedy_steps = 16;
    eval.greedy_prompts = replay_prompts();
    eval.runner.target_seconds = options_.slow_seconds_per_shape * 1.5;
    eval.runner.min_rep = 20;
    eval.runner.max_seconds = 90;
    eval.runner.min_effect = min_effect_slow_;
    const tune::Evaluation evaluation = tune::evaluate_candidate(*supervisor, to_candidate(record), eval);
    record_result(record, "final", evaluation);
    if (progress_) {
        progress_->event(fmt::format("final: {} {}", evaluation.verdict.code, evaluation.verdict.reason));
    }
}

constexpr double kMaxCalibratedEffect = 0.10;

// The A/A run: the incumbent's sources and knobs, built again (a define no source reads makes it a
// separate artifact, loaded beside the incumbent's as any candidate is), timed against the incumbent
// on each tier as a candidate would be. Builds and agents run meanwhile, as they do for candidates.
void CampaignRun::calibrate() {
    if (!options_.calibrate) return;
    tune::Candidate copy;
    copy.dir = objects_.sources(source_hash_);
    copy.parent = campaign_.incumbent;
    copy.agent = "calibration";
    if (campaign_.incumbent != "baseline") {
        auto found = store_->find_candidates(campaign_.incumbent);
        if (!found.ok() || found->empty()) {
            // Not the baseline's sources instead: that would time the incumbent's own win.
            note("campaign", "", fmt::format("A/A calibration skipped: the incumbent {} is not in the store", campaign_.incumbent));
            return;
        }
        copy = to_candidate(found->front());
    }
    copy.knobs["HOTPASS_CALIBRATION_COPY"] = "1";
    for (const bool slow_tier : {false, true}) {
        if (!slow_tier && !options_.two_tiers) continue;
        if (!budget_left()) return;
        const std::string tier = slow_tier ? "slow" : "fast";
        progress_->event(fmt::format("calibrating the {} tier: the incumbent against a second build of itself", tier));
        tune::Supervisor &supervisor = slow_tier ? *slow_ : *fast_;
        const tune::Evaluation evaluation = tune::evaluate_candidate(supervisor, copy, tier_options(slow_tier));
        if (options_.fresh_executor) supervisor.stop();
        {
            std::lock_guard lock(mutex_);
            executor_starts_ += evaluation.executor_starts;
        }
        double &min_effect = slow_tier ? min_effect_slow_ : min_effect_fast_;
        std::string text;
        if (!evaluation.measurement || !evaluation.verdict.correct()) {
            // A timing the verdict refused (too slow, impossible, wrong after timing) says nothing
            // about the noise.
            text = fmt::format("A/A calibration of the {} tier failed ({}: {}); its minimum effect stays {:.1f}%", tier, evaluation.verdict.code,
                               evaluation.verdict.reason, 100 * min_effect);
        } else {
            const tune::Measurement &m = *evaluation.measurement;
            // The difference two copies of the same code showed. Not the interval's far end: a
            // candidate's own interval already carries its sampling spread. At most kMaxCalibratedEffect:
            // beyond that the timing is too unsteady for any threshold to help.
            min_effect = std::min(kMaxCalibratedEffect, std::max(min_effect, std::fabs(m.speedup - 1)));
            text = fmt::format("A/A calibration, {} tier: a second build of the incumbent timed {:.3f}x it (95% CI {:.3f}-{:.3f}, {}); "
                               "a win on this tier must now exceed {:.1f}%",
                               tier, m.speedup, m.speedup_ci.low, m.speedup_ci.high, evaluation.verdict.code, 100 * min_effect);
            if (evaluation.verdict.faster()) text += " (the copy was called faster: timing on this machine is unsteady)";
        }
        note("campaign", "", text);
        progress_->event(text);
    }
}

ProgressState CampaignRun::progress_state() {
    std::lock_guard lock(mutex_);
    ProgressState state;
    state.elapsed_s = elapsed();
    state.budget_s = options_.budget.seconds;
    state.n_candidate = int(known_.size());
    state.budget_candidates = options_.budget.candidates;
    state.n_built = n_built_;
    state.n_build_failed = n_build_failed_;
    state.n_verified = n_verified_;
    state.n_promoted = n_promoted_;
    state.best = campaign_.incumbent;
    state.best_speedup = best_speedup_;
    state.executor_starts = executor_starts_;
    state.queued = int(build_queue_.size() + ready_queue_.size());
    return state;
}

Result<CampaignSummary> CampaignRun::run() {
    HP_TRY(setup());
    start_ = now_seconds();
    progress_ = std::make_unique<Progress>(options_.live, campaign_.id, [this] { return progress_state(); });
    progress_->event(fmt::format("campaign {} {}: {} on {}, traffic {}, tiers {}, fast shapes {}, slow shapes {}, store {}",
                                 campaign_.id, options_.resume ? "resumed" : "started", options_.model, campaign_.hardware, options_.traffic,
                                 campaign_.tiers, traffic_.fast_shapes.size(), traffic_.slow_shapes.size(), store_->path().string()));
    std::vector<std::thread> threads;
    n_agents_running_ = int(agents_.size());
    for (size_t i = 0; i < agents_.size(); ++i) threads.emplace_back([this, i] { agent_loop(i); });
    threads.emplace_back([this] { builder_loop(); });
    calibrate();

    bool all_done = false;
    while (budget_left()) {
        int64_t id = 0;
        bool slow_tier = false;
        {
            std::unique_lock lock(mutex_);
            const bool candidates_spent = options_.budget.candidates > 0 && n_first_tier_ >= options_.budget.candidates;
            if (candidates_spent && slow_queue_.empty()) break;  // promoted candidates still get their slow-tier run
            if (n_agents_running_ == 0 && !building_ && build_queue_.empty() && ready_queue_.empty() && slow_queue_.empty()) {
                all_done = true;
                break;
            }
            if (!slow_queue_.empty()) {
                id = slow_queue_.front();
                slow_queue_.pop_front();
                slow_tier = true;
            } else if (!ready_queue_.empty() && !candidates_spent) {
                id = ready_queue_.front();
                ready_queue_.pop_front();
                slow_tier = !options_.two_tiers;
            } else {
                wake_.wait_for(lock, std::chrono::milliseconds(250));
            }
        }
        if (id) evaluate(id, slow_tier);
        progress_->tick();
        if (now_seconds() - last_saved_ > 1) {
            (void)store_->set_elapsed(campaign_.id, elapsed());
            last_saved_ = now_seconds();
        }
    }
    stopping_ = true;
    wake_.notify_all();
    progress_->event(all_done                  ? "every agent has stopped and every candidate is evaluated"
                     : stop_ && stop_->load() ? "stopped by a signal; waiting for the agents and the build in progress"
                                              : "budget spent; waiting for the agents and the build in progress");
    for (std::thread &thread : threads) thread.join();
    (void)store_->set_elapsed(campaign_.id, elapsed());
    // Candidates built or queued but never evaluated stay in the store (a resume picks them up).
    final_check();
    // The executors' sockets and logs (their failures are in the store's verdicts by now).
    fast_.reset();
    slow_.reset();
    for (const char *name : {"fast", "slow", "final"}) {
        std::error_code code;
        fs::remove_all(executor_dir(name), code);
    }
    (void)store_->set_campaign_status(campaign_.id, stop_ && stop_->load() ? "stopped" : "finished");
    (void)store_->set_elapsed(campaign_.id, elapsed());
    progress_->finish();

    CampaignSummary summary;
    summary.id = campaign_.id;
    summary.status = stop_ && stop_->load() ? "stopped" : "finished";
    summary.n_candidate = int(known_.size());
    summary.n_built = n_built_;
    summary.n_build_failed = n_build_failed_;
    summary.n_verified = n_verified_;
    summary.n_fast = n_fast_;
    summary.n_slow = n_slow_;
    summary.n_promoted = n_promoted_;
    summary.n_lost = n_lost_;
    summary.executor_starts = executor_starts_;
    summary.elapsed_s = elapsed();
    summary.winner = campaign_.incumbent;
    summary.winner_speedup = best_speedup_;
    {
        const fs::path out = options_.out.empty() ? fs::current_path() / fmt::format("hotpass-campaign-{}", campaign_.id) : options_.out;
        auto report = write_report(*store_, campaign_.id, objects_, out);
        if (!report.ok()) return error("campaign {} finished but its report failed: {}", campaign_.id, report.error());
        summary.winner_speedup = report->winner_speedup;
        summary.winner_measured = report->winner_measured;
        summary.winner_ci_low = report->winner_ci_low;
        summary.winner_ci_high = report->winner_ci_high;
        summary.winner_significant = report->winner_significant;
        summary.report_dir = out;
    }
    return summary;
}

}  // namespace

Result<CampaignSummary> run_campaign(const CampaignOptions &options, const std::atomic<bool> *stop) {
    const fs::path path = options.store.empty() ? default_store_path() : options.store;
    auto store = store::Store::open(path);
    if (!store.ok()) return Error{store.error()};
    CampaignRun run(options, std::move(store).value(), stop);
    return run.run();
}

}  // namespace hp::campaign
