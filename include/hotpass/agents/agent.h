// The Agent interface (DESIGN §7): an agent proposes candidates given a read-only view of the
// campaign (the incumbent, the population of evaluated candidates, the board) and observes the
// results. The campaign calls propose() from the agent's own thread, so an agent may take its
// time; failures are data (an empty proposal with a reason), never exceptions. Agents that work in
// turns and want each verdict before they go on (command, llm) submit through `Submissions`
// during propose() instead of returning one proposal.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
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
    std::string reason;    // the verdict's sentence (a build failure's first compiler errors)
};

struct Proposal;

// The campaign's side of an agent that submits while it works. Thread-safe; valid for the whole
// propose() call.
class Submissions {
public:
    virtual ~Submissions() = default;
    // Queues `proposal` as a candidate of `agent`; its hash, or why it was refused (budget spent,
    // unreadable sources). A candidate proposed before (by anyone) is not queued twice: its hash
    // is returned and result() gives the earlier verdict.
    virtual Result<std::string> submit(const std::string &agent, const Proposal &proposal) = 0;
    // The candidate's first verdict (build or first tier), or nullopt while it waits or runs.
    virtual std::optional<ResultSummary> result(const std::string &hash) = 0;
    // True once the campaign is ending: stop waiting, end the turn.
    virtual bool stopping() = 0;
    // The campaign's own clock (seconds), for records.
    virtual double elapsed_seconds() { return 0; }
};

struct AgentContext {
    std::string incumbent = "baseline";  // candidate hash or "baseline"
    Knobs incumbent_knobs;               // the incumbent's knob values (non-default ones)
    std::vector<ResultSummary> results;  // the shared population, oldest first
    std::set<std::string> known;         // hashes already proposed by anyone (queued or evaluated)
    std::vector<store::BoardNote> notes; // the latest board notes
    Submissions *submissions = nullptr;  // null outside a campaign (agents then return proposals)
};

struct Proposal {
    std::filesystem::path source_dir;  // sources to build (copied into the store by the campaign)
    Knobs knobs;
    std::string parent = "baseline";
    std::string notes;
};

struct ProposeOutcome {
    std::optional<Proposal> proposal;
    std::string reason;      // why there is none (search space exhausted, endpoint down, ...), or what the turn did
    bool exhausted = false;  // the agent will never propose again (retired)
    int n_submitted = 0;     // candidates submitted through Submissions during this turn: not a failure
    double retry_after_seconds = 0;  // > 0: wait this long before the next propose() (e.g. HTTP 429 Retry-After)
};

class Agent {
public:
    virtual ~Agent() = default;
    virtual const std::string &name() const = 0;
    virtual ProposeOutcome propose(const AgentContext &context) = 0;
    virtual void observe(const ResultSummary &result) {}
};

}  // namespace hp::agents
