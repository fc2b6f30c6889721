// Content-addressed files beside the database: candidate sources under objects/sources/<hash>/
// (the hash of every file's relative path and bytes) and build artifacts under artifacts/<key>/
// (the builder's own cache, keyed by sources + flags + compiler). Writes go to a temporary
// directory renamed into place, so a reader never sees half a source tree.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "hotpass/core/result.h"

namespace hp::store {

// xxh128 over the sorted relative paths and contents of the regular files under `dir`,
// `candidate.json` excluded (it is metadata, not source).
Result<std::string> hash_source_dir(const std::filesystem::path &dir);

// A candidate's identity: its sources and its knob values.
std::string candidate_hash(const std::string &source_hash, const std::map<std::string, std::string> &knobs);

class ObjectStore {
public:
    explicit ObjectStore(std::filesystem::path root) : root_(std::move(root)) {}

    // Copies `dir`'s files (not candidate.json) to objects/sources/<hash>/ unless present.
    Result<std::string> put_sources(const std::filesystem::path &dir);
    std::filesystem::path sources(const std::string &hash) const { return root_ / "objects" / "sources" / hash; }
    std::filesystem::path artifacts() const { return root_ / "artifacts"; }
    const std::filesystem::path &root() const { return root_; }

private:
    std::filesystem::path root_;
};

}  // namespace hp::store
