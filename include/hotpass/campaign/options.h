// What `hotpass optimize` is told on its command line, parsed: budgets, agent kinds and counts,
// and where the store and the in-tree baseline live by default.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::campaign {

struct AgentSpec {
    std::string kind;  // knob-random | knob-evolve | command | llm
    int count = 1;
};

// "knob-search:2" (= one random and one evolve agent), "knob-random:1,knob-evolve:2",
// "command:1" (runs --agent-command), "llm:2" (talks to the HOTPASS_LLM_* endpoint); comma-separated.
Result<std::vector<AgentSpec>> parse_agent_specs(const std::string &spec);
// "3m", "180s", "1h", "20" (candidates), "5m,40" (both). Zero means unlimited.
struct Budget {
    double seconds = 0;
    int candidates = 0;
};
Result<Budget> parse_budget(const std::string &spec);

// Where the in-tree baseline sources of `device` (cpu, cuda) are: the source tree, or
// <prefix>/share/hotpass next to the binary.
std::filesystem::path default_baseline_source(const std::string &device = "cpu");
// $HOTPASS_STORE, else $XDG_DATA_HOME/hotpass/store.db, else ~/.local/share/hotpass/store.db.
std::filesystem::path default_store_path();

}  // namespace hp::campaign
