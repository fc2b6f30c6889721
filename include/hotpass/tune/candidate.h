// Candidate: a forward pass proposed by an agent, as a directory of sources plus candidate.json
// {"parent": ..., "agent": ..., "knobs": {"NAME": value}, "notes": ...}. Plain data.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "hotpass/core/result.h"

namespace hp::tune {

struct Candidate {
    std::filesystem::path dir;
    std::string parent;  // content hash of the parent candidate, or an in-tree name
    std::string agent;
    std::map<std::string, std::string> knobs;  // knob name -> value, as -D NAME=value
    std::string notes;
};

// Reads `dir/candidate.json` (optional: a bare source directory is a candidate with no metadata).
Result<Candidate> load_candidate(const std::filesystem::path &dir);

}  // namespace hp::tune
