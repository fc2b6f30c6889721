// KvCache: the paged KV cache, allocated once per engine and never touched by a plugin swap.
// Layout (fixed by the ABI): per layer, K and V are dtype [n_block][block_tokens][n_head_kv][d_head].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hotpass/backend/backend.h"
#include "hotpass/core/dtype.h"
#include "hotpass/core/result.h"
#include "hotpass/forward_abi.h"

namespace hp::engine {

struct KvCacheOptions {
    DType dtype = DType::f32;
    int block_tokens = 16;
    int n_block = 0;  // 0: enough for max_tokens
    int64_t max_tokens = 8192;
};

class KvCache {
public:
    static Result<std::unique_ptr<KvCache>> create(int n_layer, int n_head_kv, int d_head, const KvCacheOptions &options);
    // The same layout in `backend`'s memory (device memory for CUDA); `backend` must outlive the
    // cache. nullptr: host memory, as the overload above.
    static Result<std::unique_ptr<KvCache>> create(int n_layer, int n_head_kv, int d_head, const KvCacheOptions &options,
                                                   backend::Backend *backend);
    ~KvCache();

    const hp_kv_cache &view() const { return view_; }
    int block_tokens() const { return view_.block_tokens; }
    int n_block() const { return view_.n_block; }
    int n_free_block() const { return int(free_blocks_.size()); }
    uint64_t n_byte() const { return n_byte_; }

    // Takes a free block; -1 when the cache is full.
    int allocate_block();
    void release_block(int block);

private:
    KvCache() = default;
    hp_kv_cache view_{};
    std::vector<void *> k_, v_;
    std::vector<int> free_blocks_;
    uint64_t n_byte_ = 0;
    backend::Backend *backend_ = nullptr;  // owns k_/v_ when set
};

}  // namespace hp::engine
