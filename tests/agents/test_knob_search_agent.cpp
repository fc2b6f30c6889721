#include "hotpass/agents/knob_search_agent.h"

#include <gtest/gtest.h>

#include "hotpass/store/objects.h"

namespace hp::agents {
namespace {

const char *kManifest = R"({
  "schema": "hotpass-knobs/1", "plugin": "test",
  "knobs": [
    {"name": "rows", "define": "HP_ROWS", "type": "int", "domain": [1, 2, 4, 8], "default": 1},
    {"name": "tokens", "define": "HP_TOKENS", "type": "int", "domain": [1, 2, 4, 8], "default": 4},
    {"name": "fuse", "define": "HP_FUSE", "type": "int", "domain": [0, 1], "default": 1}
  ],
  "constraints": [{"expr": "HP_ROWS * HP_TOKENS <= 16", "why": "registers"}]})";

KnobSearchAgent make(KnobStrategy strategy, uint64_t seed) {
    return KnobSearchAgent("agent", strategy, parse_knob_manifest(kManifest).value(), "/src", "srchash", seed);
}

// Runs an agent until it stops proposing, feeding each proposal back as known.
std::vector<Proposal> drain(KnobSearchAgent &agent, AgentContext &context, int limit) {
    std::vector<Proposal> proposals;
    for (int i = 0; i < limit; ++i) {
        ProposeOutcome outcome = agent.propose(context);
        if (!outcome.proposal) break;
        context.known.insert(store::candidate_hash("srchash", outcome.proposal->knobs));
        proposals.push_back(*outcome.proposal);
    }
    return proposals;
}

TEST(KnobSearchAgent, RandomCoversTheLegalSpaceWithoutRepeatsOrIllegalCombinations) {
    // 4 x 4 x 2 = 32 combinations; rows*tokens <= 16 removes (8,4),(8,8),(4,8) x 2 = 6; the
    // defaults are the baseline: 25 proposals, then none.
    auto agent = make(KnobStrategy::random, 1);
    const KnobManifest manifest = parse_knob_manifest(kManifest).value();
    AgentContext context;
    const auto proposals = drain(agent, context, 100);
    EXPECT_EQ(proposals.size(), 25u);
    std::set<Knobs> seen;
    for (const Proposal &p : proposals) {
        EXPECT_FALSE(knob_violation(manifest, agent.to_values(p.knobs)).has_value());
        EXPECT_FALSE(p.knobs.empty());
        EXPECT_TRUE(seen.insert(p.knobs).second);
        for (const auto &[define, value] : p.knobs) {
            // Only non-default values are carried.
            const auto defaults = default_knob_values(manifest);
            EXPECT_NE(std::to_string(defaults.at(define)), value);
        }
    }
    EXPECT_FALSE(agent.propose(context).proposal.has_value());
}

TEST(KnobSearchAgent, EvolveMutatesTheBestOfTheSharedPopulation) {
    auto agent = make(KnobStrategy::evolve, 7);
    AgentContext context;
    // Another agent's result on the board: the best candidate so far (the baseline's sources with
    // knobs, so its hash is theirs), and a worse one.
    const Knobs best_knobs = {{"HP_ROWS", "2"}, {"HP_TOKENS", "8"}};
    const std::string best_hash = store::candidate_hash("srchash", best_knobs);
    ResultSummary best{best_hash, "other", "baseline", best_knobs, "fast", "faster", 1.3, true, ""};
    context.results.push_back(best);
    context.results.push_back({"worse", "other", "baseline", {{"HP_FUSE", "0"}}, "fast", "not_faster", 0.8, true, ""});
    context.known = {best_hash, "worse"};
    int from_best = 0, n = 0;
    for (int i = 0; i < 15; ++i) {  // of 25 legal combinations
        ProposeOutcome outcome = agent.propose(context);
        ASSERT_TRUE(outcome.proposal.has_value()) << outcome.reason;
        context.known.insert(store::candidate_hash("srchash", outcome.proposal->knobs));
        ++n;
        EXPECT_NE(outcome.proposal->parent, "worse") << "'worse' has other sources than the baseline's: a child names the baseline";
        if (outcome.proposal->parent == best_hash) {
            ++from_best;
            // A mutation changes one or two knobs of its parent.
            const KnobValues parent = agent.to_values(best.knobs), child = agent.to_values(outcome.proposal->knobs);
            int changed = 0;
            for (const auto &[define, value] : parent) changed += child.at(define) != value;
            EXPECT_GE(changed, 1);
            EXPECT_LE(changed, 2);
        }
    }
    EXPECT_GT(from_best, n / 4) << "the best candidate should be a frequent parent";
}

TEST(KnobSearchAgent, TheSameSeedProposesTheSameSequence) {
    auto a = make(KnobStrategy::random, 42), b = make(KnobStrategy::random, 42);
    AgentContext ca, cb;
    const auto pa = drain(a, ca, 10), pb = drain(b, cb, 10);
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].knobs, pb[i].knobs);
}

}  // namespace
}  // namespace hp::agents
