#include "hotpass/engine/kv_cache.h"

#include <cstdlib>
#include <cstring>

namespace hp::engine {

Result<std::unique_ptr<KvCache>> KvCache::create(int n_layer, int n_head_kv, int d_head, const KvCacheOptions &options) {
    return create(n_layer, n_head_kv, d_head, options, nullptr);
}

Result<std::unique_ptr<KvCache>> KvCache::create(int n_layer, int n_head_kv, int d_head, const KvCacheOptions &options,
                                                 backend::Backend *backend) {
    if (options.block_tokens <= 0) return error("kv cache: block_tokens must be positive, got {}", options.block_tokens);
    std::unique_ptr<KvCache> cache(new KvCache());
    cache->backend_ = backend;
    const int n_block = options.n_block > 0 ? options.n_block
                                            : int((options.max_tokens + options.block_tokens - 1) / options.block_tokens);
    const uint64_t layer_bytes =
        uint64_t(n_block) * uint64_t(options.block_tokens) * uint64_t(n_head_kv) * uint64_t(d_head) * dtype_size(options.dtype);
    for (int layer = 0; layer < n_layer; ++layer) {
        for (auto *list : {&cache->k_, &cache->v_}) {
            void *memory = backend ? backend->alloc(layer_bytes, 256) : std::aligned_alloc(64, (layer_bytes + 63) / 64 * 64);
            if (!memory) return error("kv cache: out of memory allocating {} bytes per layer", layer_bytes);
            if (!backend) std::memset(memory, 0, layer_bytes);  // backend memory comes zeroed
            list->push_back(memory);
        }
    }
    cache->n_byte_ = 2 * layer_bytes * uint64_t(n_layer);
    cache->view_.dtype = hp_dtype(options.dtype);
    cache->view_.block_tokens = options.block_tokens;
    cache->view_.n_block = n_block;
    cache->view_.k = cache->k_.data();
    cache->view_.v = cache->v_.data();
    for (int block = n_block - 1; block >= 0; --block) cache->free_blocks_.push_back(block);
    return cache;
}

KvCache::~KvCache() {
    for (auto *list : {&k_, &v_}) {
        for (void *memory : *list) backend_ ? backend_->free(memory) : std::free(memory);
    }
}

int KvCache::allocate_block() {
    if (free_blocks_.empty()) return -1;
    const int block = free_blocks_.back();
    free_blocks_.pop_back();
    return block;
}

void KvCache::release_block(int block) {
    HP_CHECK(block >= 0 && block < view_.n_block, "release of block {} outside [0, {})", block, view_.n_block);
    free_blocks_.push_back(block);
}

}  // namespace hp::engine
