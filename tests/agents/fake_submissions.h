// A stand-in for the campaign's side of Submissions: records what agents submit and answers each
// submission at once with the next scripted verdict.
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "hotpass/agents/agent.h"
#include "hotpass/store/objects.h"

namespace hp::agents {

class FakeSubmissions : public Submissions {
public:
    struct Scripted {
        std::string code;
        std::string reason;
        double speedup = 0;
    };
    std::deque<Scripted> verdicts;  // consumed in order; empty: not_faster
    std::vector<Proposal> proposals;

    Result<std::string> submit(const std::string &agent, const Proposal &proposal) override {
        auto source_hash = store::hash_source_dir(proposal.source_dir);
        if (!source_hash.ok()) return Error{source_hash.error()};
        proposals.push_back(proposal);
        const std::string hash = store::candidate_hash(*source_hash, proposal.knobs);
        Scripted next = verdicts.empty() ? Scripted{"not_faster", "correct; 0.99x", 0.99} : verdicts.front();
        if (!verdicts.empty()) verdicts.pop_front();
        results_[hash] = ResultSummary{hash, agent, proposal.parent, proposal.knobs, "fast", next.code, next.speedup, false, next.reason};
        return hash;
    }
    std::optional<ResultSummary> result(const std::string &hash) override {
        auto found = results_.find(hash);
        if (found == results_.end()) return std::nullopt;
        return found->second;
    }
    bool stopping() override { return false; }

private:
    std::map<std::string, ResultSummary> results_;
};

}  // namespace hp::agents
