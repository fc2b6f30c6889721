// The Agent interface (DESIGN §7): an agent proposes candidates given a read-only view of the
// campaign (the incumbent, the population of evaluated candidates, the board) and observes the
// results. The campaign calls propose() from the agent's own thread, so an agent may take its
// time; failures are data (an empty proposal with a reason), never exceptions.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hotpass/store/records.h"

namespace hp::agents {

using Knobs = std::map<std::string, std::string>;  // -D define -> value

// One evaluated candidate as agents see it: the best tier it reached and how it did there.
struct ResultSummary {
    std::string hash;
    std::string agent;
    std::string parent;
    Knobs knobs;
    std::string tier;      // fast | slow | build
    std::string code;      // the verdict code
    double speedup = 0;    // against the incumbent of its time (0 when not measured)
    bool significant = false;
};

struct AgentContext {
    std::string incumbent = "baseline";  // candidate hash or "baseline"
    Knobs incumbent_knobs;               // the incumbent's knob values (non-default ones)
    std::vector<ResultSummary> results;  // the shared population, oldest first
    std::set<std::string> known;         // hashes already proposed by anyone (queued or evaluated)
    std::vector<store::BoardNote> notes; // the latest board notes
};

struct Proposal {
    std::filesystem::path source_dir;  // sources to build (copied into the store by the campaign)
    Knobs knobs;
    std::string parent = "baseline";
    std::string notes;
};

struct ProposeOutcome {
    std::optional<Proposal> proposal;
    std::string reason;      // why there is none (search space exhausted, endpoint down, ...)
    bool exhausted = false;  // the agent will never propose again
};

class Agent {
public:
    virtual ~Agent() = default;
    virtual const std::string &name() const = 0;
    virtual ProposeOutcome propose(const AgentContext &context) = 0;
    virtual void observe(const ResultSummary &result) {}
};

}  // namespace hp::agents
