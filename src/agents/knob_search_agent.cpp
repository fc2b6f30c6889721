#include "hotpass/agents/knob_search_agent.h"

#include <fmt/format.h>

#include <algorithm>

#include "hotpass/store/objects.h"

namespace hp::agents {

namespace {
constexpr int kAttempts = 400;  // samples tried per proposal before declaring the space exhausted
}

KnobSearchAgent::KnobSearchAgent(std::string name, KnobStrategy strategy, KnobManifest manifest, std::filesystem::path source_dir,
                                 std::string source_hash, uint64_t seed)
    : name_(std::move(name)),
      strategy_(strategy),
      manifest_(std::move(manifest)),
      source_dir_(std::move(source_dir)),
      source_hash_(std::move(source_hash)),
      rng_(seed) {}

Knobs KnobSearchAgent::to_candidate_knobs(const KnobValues &values) const {
    Knobs knobs;
    for (const KnobSpec &knob : manifest_.knobs) {
        const auto found = values.find(knob.define);
        if (found != values.end() && found->second != knob.default_value) knobs[knob.define] = std::to_string(found->second);
    }
    return knobs;
}

KnobValues KnobSearchAgent::to_values(const Knobs &knobs) const {
    KnobValues values = default_knob_values(manifest_);
    for (const auto &[define, value] : knobs) {
        try {
            values[define] = std::stoll(value);
        } catch (const std::exception &) {
            values[define] = INT64_MIN;  // not an integer: knob_violation reports it
        }
    }
    return values;
}

KnobValues KnobSearchAgent::sample_random() {
    KnobValues values;
    for (const KnobSpec &knob : manifest_.knobs) {
        values[knob.define] = knob.domain[std::uniform_int_distribution<size_t>(0, knob.domain.size() - 1)(rng_)];
    }
    return values;
}

// Moves one or two distinct knobs (with more than one legal value) to another value of their domain.
KnobValues KnobSearchAgent::mutate(const KnobValues &parent) {
    KnobValues child = parent;
    std::vector<size_t> movable;
    for (size_t i = 0; i < manifest_.knobs.size(); ++i) {
        if (manifest_.knobs[i].domain.size() > 1) movable.push_back(i);
    }
    std::shuffle(movable.begin(), movable.end(), rng_);
    const size_t n_change = std::min<size_t>(movable.size(), std::uniform_int_distribution<size_t>(1, 2)(rng_));
    for (size_t change = 0; change < n_change; ++change) {
        const KnobSpec &knob = manifest_.knobs[movable[change]];
        const auto &domain = knob.domain;
        const auto at = std::find(domain.begin(), domain.end(), child[knob.define]);
        const size_t current = at == domain.end() ? 0 : size_t(at - domain.begin());
        size_t index = current;
        if (std::uniform_real_distribution<double>(0, 1)(rng_) < 0.3 || domain.size() < 3) {
            // Any other value of the domain.
            index = std::uniform_int_distribution<size_t>(0, domain.size() - 2)(rng_);
            if (index >= current) ++index;
        } else {
            // A neighbouring value: tile sizes and thresholds are ordered, small steps climb.
            const bool up = current == 0 || (current + 1 < domain.size() && std::uniform_int_distribution<int>(0, 1)(rng_));
            index = up ? current + 1 : current - 1;
        }
        child[knob.define] = domain[index];
    }
    return child;
}

ProposeOutcome KnobSearchAgent::propose(const AgentContext &context) {
    // The evolve strategy's parents: the incumbent (speedup 1 against itself) and the correct
    // candidates measured against it (the shared population), the four best first.
    const ResultSummary incumbent{context.incumbent, "", "", context.incumbent_knobs, "", "incumbent", 1.0, false, ""};
    std::vector<const ResultSummary *> ranked = {&incumbent};
    for (const ResultSummary &result : context.results) {
        if ((result.code == "faster" || result.code == "not_faster") && result.speedup > 0) ranked.push_back(&result);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](auto *a, auto *b) { return a->speedup > b->speedup; });
    if (ranked.size() > 4) ranked.resize(4);

    for (int attempt = 0; attempt < kAttempts; ++attempt) {
        KnobValues values;
        std::string parent = context.incumbent, how;
        if (strategy_ == KnobStrategy::random || attempt >= kAttempts / 2) {
            values = sample_random();
            how = "random sample";
        } else {
            // Tournament of two among the best: the better of two random picks is the parent.
            const size_t pick = std::min(std::uniform_int_distribution<size_t>(0, ranked.size() - 1)(rng_),
                                         std::uniform_int_distribution<size_t>(0, ranked.size() - 1)(rng_));
            KnobValues base = to_values(ranked[pick]->knobs);
            // The child is always the baseline's sources with knobs: a parent with other sources (an
            // llm or command agent's candidate) lends its knob values only, and the child's parent
            // is then the baseline, so that `hotpass show` diffs it against the code it was built from.
            const std::string &picked = ranked[pick]->hash;
            const bool same_sources = picked == "baseline" || store::candidate_hash(source_hash_, ranked[pick]->knobs) == picked;
            parent = same_sources ? picked : "baseline";
            values = mutate(base);
            std::vector<std::string> diffs;
            for (const KnobSpec &knob : manifest_.knobs) {
                if (base[knob.define] != values[knob.define]) {
                    diffs.push_back(fmt::format("{} {}->{}", knob.define, base[knob.define], values[knob.define]));
                }
            }
            how = fmt::format("mutation of {}{}: {}", picked.substr(0, 12), same_sources ? "" : "'s knobs on the baseline's sources",
                              fmt::join(diffs, ", "));
        }
        if (knob_violation(manifest_, values)) continue;  // illegal: never built
        const Knobs knobs = to_candidate_knobs(values);
        if (knobs.empty()) continue;  // the defaults: the baseline itself
        const std::string hash = store::candidate_hash(source_hash_, knobs);
        if (context.known.count(hash)) continue;
        Proposal proposal;
        proposal.source_dir = source_dir_;
        proposal.knobs = knobs;
        proposal.parent = parent;
        proposal.notes = fmt::format("{} ({})", how, strategy_ == KnobStrategy::random ? "random" : "evolve");
        return {std::move(proposal), "", false};
    }
    return {std::nullopt, fmt::format("no new legal combination in {} samples", kAttempts), false};
}

}  // namespace hp::agents
