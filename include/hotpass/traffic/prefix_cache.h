// A prefix cache of bounded capacity (LRU over prefix blocks), used to measure prefix reuse: the
// share of prompt blocks a cache could have served because an earlier request had the same prefix.
// Only the leading run of cached blocks counts (a cache serves a prefix, not scattered blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace hp::traffic {

class PrefixCache {
  public:
    explicit PrefixCache(uint64_t capacity_blocks) : capacity_blocks_(capacity_blocks) {}

    // Looks the prompt's blocks up, then inserts them all. Returns the number of leading blocks
    // that were already cached.
    uint32_t lookup_and_insert(const std::vector<uint64_t> &prefix_hashes);

    uint64_t size_blocks() const { return position_.size(); }
    uint64_t evicted_blocks() const { return evicted_blocks_; }
    size_t memory_bytes() const;

  private:
    void touch(uint64_t hash);

    uint64_t capacity_blocks_;
    std::list<uint64_t> recency_;  // front: most recently used
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> position_;
    uint64_t evicted_blocks_ = 0;
};

}  // namespace hp::traffic
