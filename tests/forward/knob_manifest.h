// The tests' view of forward/cpu/baseline/knobs.json: the manifest reader and constraint
// evaluator of hotpass_agents (the one the knob-search agents use), with test-friendly names.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "hotpass/agents/knob_manifest.h"

namespace hp::test {

using Knob = agents::KnobSpec;
using agents::default_knob_values;
using agents::KnobManifest;
using agents::KnobValues;

inline KnobManifest load_knob_manifest(const std::string &path) {
    auto manifest = agents::load_knob_manifest(path);
    if (!manifest.ok()) throw std::runtime_error(manifest.error());
    return std::move(manifest).value();
}

// Why `values` is illegal, or nullopt when it is legal.
inline std::optional<std::string> violated_constraint(const KnobManifest &manifest, const KnobValues &values) {
    return agents::knob_violation(manifest, values);
}

}  // namespace hp::test
