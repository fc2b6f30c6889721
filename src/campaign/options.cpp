#include "hotpass/campaign/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace hp::campaign {
namespace fs = std::filesystem;

namespace {
constexpr double kMaxBudgetSeconds = 30 * 86400.0;
constexpr int kMaxBudgetCandidates = 1000000;
}  // namespace

fs::path default_baseline_source(const std::string &device) {
    const fs::path relative = fs::path("forward") / (device == "cuda" ? "cuda" : "cpu") / "baseline";
    std::error_code code;
    const fs::path exe = fs::read_symlink("/proc/self/exe", code);
    const fs::path installed = exe.parent_path().parent_path() / "share/hotpass" / relative;
    if (fs::exists(installed / "knobs.json")) return installed;
    return fs::path(HOTPASS_SOURCE_DIR) / relative;
}

fs::path default_store_path() {
    if (const char *store = std::getenv("HOTPASS_STORE"); store && *store) return store;
    if (const char *data = std::getenv("XDG_DATA_HOME"); data && *data) return fs::path(data) / "hotpass/store.db";
    const char *home = std::getenv("HOME");
    return fs::path(home && *home ? home : "/tmp") / ".local/share/hotpass/store.db";
}

Result<std::vector<AgentSpec>> parse_agent_specs(const std::string &spec) {
    std::vector<AgentSpec> specs;
    size_t start = 0;
    while (start <= spec.size()) {
        const size_t end = std::min(spec.find(',', start), spec.size());
        const std::string item = spec.substr(start, end - start);
        start = end + 1;
        if (item.empty()) continue;
        const size_t colon = item.find(':');
        AgentSpec agent{item.substr(0, colon), 1};
        if (colon != std::string::npos) {
            try {
                agent.count = std::stoi(item.substr(colon + 1));
            } catch (const std::exception &) {
                return error("--agents: bad count in '{}'", item);
            }
        }
        if (agent.count < 1) return error("--agents: count must be >= 1 in '{}'", item);
        if (agent.kind == "knob-search") {
            // knob-search:N alternates the two strategies, random first.
            const int n_random = (agent.count + 1) / 2, n_evolve = agent.count / 2;
            specs.push_back({"knob-random", n_random});
            if (n_evolve) specs.push_back({"knob-evolve", n_evolve});
        } else if (agent.kind == "knob-random" || agent.kind == "knob-evolve" || agent.kind == "command" || agent.kind == "llm") {
            specs.push_back(agent);
        } else {
            return error("--agents: unknown kind '{}' (knob-search, knob-random, knob-evolve, command, llm)", agent.kind);
        }
    }
    if (specs.empty()) return error("--agents: no agent given");
    return specs;
}

Result<Budget> parse_budget(const std::string &spec) {
    Budget budget;
    size_t start = 0;
    while (start <= spec.size()) {
        const size_t end = std::min(spec.find(',', start), spec.size());
        const std::string item = spec.substr(start, end - start);
        start = end + 1;
        if (item.empty()) continue;
        size_t used = 0;
        double value = 0;
        try {
            value = std::stod(item, &used);
        } catch (const std::exception &) {
            return error("--budget: cannot read '{}' (e.g. 3m, 90s, 1h, 40 candidates, or 3m,40)", item);
        }
        const std::string unit = item.substr(used);
        if (!std::isfinite(value)) return error("--budget: '{}' is not a finite number", item);
        if (value < 0) return error("--budget: negative '{}'", item);
        if (unit.empty() || unit == "c") {
            if (value != std::floor(value) || value > kMaxBudgetCandidates) {
                return error("--budget: '{}' is not a whole number of candidates up to {}", item, kMaxBudgetCandidates);
            }
            budget.candidates = int(value);
        }
        else if (unit == "s") budget.seconds = value;
        else if (unit == "m" || unit == "min") budget.seconds = value * 60;
        else if (unit == "h") budget.seconds = value * 3600;
        else return error("--budget: unknown unit '{}' in '{}'", unit, item);
        if (budget.seconds > kMaxBudgetSeconds) return error("--budget: '{}' is more than 30 days", item);
    }
    if (budget.seconds == 0 && budget.candidates == 0) return error("--budget: give a time (3m) and/or a candidate count");
    return budget;
}

}  // namespace hp::campaign
