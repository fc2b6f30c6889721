// LRU over block hashes: a list for recency, a hash map from block to its list node.
#include "hotpass/traffic/prefix_cache.h"

namespace hp::traffic {

void PrefixCache::touch(uint64_t hash) {
    auto found = position_.find(hash);
    if (found != position_.end()) {
        recency_.splice(recency_.begin(), recency_, found->second);
        return;
    }
    if (capacity_blocks_ == 0) return;
    if (position_.size() >= capacity_blocks_) {
        position_.erase(recency_.back());
        recency_.pop_back();
        ++evicted_blocks_;
    }
    recency_.push_front(hash);
    position_.emplace(hash, recency_.begin());
}

uint32_t PrefixCache::lookup_and_insert(const std::vector<uint64_t> &prefix_hashes) {
    uint32_t leading_hits = 0;
    while (leading_hits < prefix_hashes.size() && position_.count(prefix_hashes[leading_hits]))
        ++leading_hits;
    for (uint64_t hash : prefix_hashes) touch(hash);
    return leading_hits;
}

size_t PrefixCache::memory_bytes() const {
    // A list node (two pointers + key) and a hash node (pointer, key, iterator) + bucket.
    return position_.size() * (3 * sizeof(void *) + 3 * sizeof(uint64_t) + sizeof(void *));
}

}  // namespace hp::traffic
