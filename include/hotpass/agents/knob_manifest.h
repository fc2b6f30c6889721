// A forward pass's knob manifest (schema hotpass-knobs/1, docs/cpu_baseline.md): integer knobs
// with exhaustive domains and defaults, and constraints that are integer C expressions over the
// knobs' -D names. A combination is legal when every value is in its domain and every constraint
// evaluates to non-zero; a parse error, an unknown name or a division by zero makes it illegal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::agents {

struct KnobSpec {
    std::string name;
    std::string define;  // the -D macro
    std::vector<int64_t> domain;
    int64_t default_value = 0;
    std::string changes;
};

struct KnobConstraint {
    std::string expr;
    std::string why;
};

struct KnobManifest {
    std::string plugin;
    std::vector<KnobSpec> knobs;
    std::vector<KnobConstraint> constraints;
};

using KnobValues = std::map<std::string, int64_t>;  // define -> value

Result<KnobManifest> parse_knob_manifest(const std::string &text);
Result<KnobManifest> load_knob_manifest(const std::filesystem::path &path);

// Every knob at its default.
KnobValues default_knob_values(const KnobManifest &manifest);
// Evaluates one constraint expression; an error on a parse error, unknown name or division by zero.
Result<int64_t> evaluate_constraint(const std::string &expr, const KnobValues &values);
// Why `values` is illegal (a domain violation or the first failing constraint with its reason),
// or nullopt when it is legal. Knobs missing from `values` take their defaults; unknown ones are illegal.
std::optional<std::string> knob_violation(const KnobManifest &manifest, const KnobValues &values);

}  // namespace hp::agents
