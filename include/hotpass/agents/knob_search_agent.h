// knob-search: proposes candidates that are an in-tree forward pass's sources with other knob
// values, never an illegal combination and never one anyone has proposed. Strategies:
//   random  uniform samples of the whole legal space;
//   evolve  hill climbing: picks a parent among the best measured candidates of the shared
//           population (or the incumbent), mutates one or two knobs to a neighbouring value (or, at
//           times, any value of its domain).
// Candidates carry only the knobs that differ from the manifest's defaults (knobs.h supplies the
// rest), so the same combination always has the same identity.
#pragma once

#include <filesystem>
#include <random>
#include <string>

#include "hotpass/agents/agent.h"
#include "hotpass/agents/knob_manifest.h"

namespace hp::agents {

enum class KnobStrategy { random, evolve };

class KnobSearchAgent : public Agent {
public:
    // `source_dir` holds the forward pass and its knobs.json; `source_hash` its store hash.
    KnobSearchAgent(std::string name, KnobStrategy strategy, KnobManifest manifest, std::filesystem::path source_dir,
                    std::string source_hash, uint64_t seed);
    const std::string &name() const override { return name_; }
    ProposeOutcome propose(const AgentContext &context) override;

    // The candidate knobs (non-default values only) of a full assignment, and back.
    Knobs to_candidate_knobs(const KnobValues &values) const;
    KnobValues to_values(const Knobs &knobs) const;

private:
    KnobValues sample_random();
    KnobValues mutate(const KnobValues &parent);

    std::string name_;
    KnobStrategy strategy_;
    KnobManifest manifest_;
    std::filesystem::path source_dir_;
    std::string source_hash_;
    std::mt19937_64 rng_;
};

}  // namespace hp::agents
