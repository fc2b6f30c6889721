// The baseline's private state: the thread pool, f32 copies of the (small) norm vectors, per-thread
// scratch, and a step arena that grows to the largest batch seen. Every buffer comes from
// hp_services.alloc (only the pool's thread objects use the C++ heap); nothing here aliases the
// engine's weights or KV cache, which the pass only reads (weights) or writes at the step's
// token positions (KV).
#pragma once

#include <hotpass/forward_abi.h>

#include <cstddef>
#include <algorithm>
#include <cstdint>

#include "matmul.h"
#include "thread_pool.h"

namespace hp_cpu {

struct LayerNorms {
    float *attn_norm = nullptr;  // [d_model]
    float *ffn_norm = nullptr;   // [d_model]
    float *q_norm = nullptr;     // [d_head], or NULL
    float *k_norm = nullptr;     // [d_head], or NULL
};

// Buffers of one step, carved from the arena; n = n_token, e = n_token * n_expert_used.
struct StepBuffers {
    float *x = nullptr;        // [n][d_model] residual stream
    float *h = nullptr;        // [n][d_model] normed input of the next matmul
    float *q = nullptr;        // [n][n_head * d_head]
    float *k = nullptr;        // [n][n_head_kv * d_head]
    float *v = nullptr;        // [n][n_head_kv * d_head]
    float *attn = nullptr;     // [n][n_head * d_head]
    float *ff_a = nullptr;     // [n][d_ff] gate, then silu(gate) * up
    float *ff_b = nullptr;     // [n][d_ff] up
    float *delta = nullptr;    // [n][d_model] (unfused residual, MoE output)
    float *logit_h = nullptr;  // [n_logit_row][d_model]
    const int32_t **block_table = nullptr;  // [n] the token's sequence's block table
    // MoE
    float *router = nullptr;        // [n][n_expert] logits, then probabilities
    int32_t *entry_token = nullptr; // [e] entries grouped by expert: which token
    float *entry_weight = nullptr;  // [e] routing weight
    int32_t *token_entry = nullptr; // [n][n_expert_used] entry of the token's j-th choice
    int32_t *expert_begin = nullptr;  // [n_expert + 1]
    float *expert_a = nullptr;      // [e][d_ff_expert]
    float *expert_b = nullptr;      // [e][d_ff_expert]
    float *expert_out = nullptr;    // [e][d_model]
    float *shared_gate = nullptr;   // [n]
    float *shared_a = nullptr;      // [n][d_ff_shared_expert]
    float *shared_b = nullptr;      // [n][d_ff_shared_expert]
    float *shared_out = nullptr;    // [n][d_model]
};

struct BaselineState {
    const hp_model *model = nullptr;
    hp_services services{};
    ThreadPool *pool = nullptr;
    int n_thread = 0;  // entries of matmul_scratch
    float *inv_freq = nullptr;  // [d_head / 2]
    LayerNorms *norms = nullptr;  // [n_layer]
    float *output_norm = nullptr;  // [d_model]
    MatmulScratch *matmul_scratch = nullptr;  // [n_thread]
    float *attention_scratch = nullptr;       // [n_thread][attention_stride]
    int64_t attention_stride = 0;
    void *arena = nullptr;
    size_t arena_bytes = 0;
    StepBuffers buf;

    void *alloc(size_t bytes) { return services.alloc(services.ctx, bytes, 64); }
    void release(void *ptr) {
        if (ptr) services.free(services.ctx, ptr);
    }
};

// Rows [0, n_row) of a matmul over n_token tokens cut into n_chunk parts: part `chunk`'s rows.
inline void chunk_rows(int64_t n_row, int64_t n_token, int64_t chunk, int64_t n_chunk, int64_t &begin, int64_t &end) {
    split_range(n_row, matmul_row_align(n_token), chunk, n_chunk, begin, end);
}
// How many parts to cut a matmul of n_row output rows of n_in inputs into: a few per thread, but
// none smaller than HP_MIN_CHUNK_WORK multiply-adds (waking a thread costs more than tiny work).
inline int64_t row_chunks(const ThreadPool &pool, int64_t n_row, int64_t n_token, int64_t n_in) {
    const int64_t align = matmul_row_align(n_token);
    const int64_t by_work = n_row * n_token * n_in / HP_MIN_CHUNK_WORK;
    return pool.chunks_for(std::min((n_row + align - 1) / align, by_work < 1 ? int64_t(1) : by_work));
}

// Runs fn(begin, end, thread) over [0, n) cut into parts aligned to `align`, each item costing
// about `item_work` operations (parts of less than HP_MIN_CHUNK_WORK / 16 are merged).
template <typename Fn>
void parallel_range(ThreadPool &pool, int64_t n, int64_t align, int64_t item_work, Fn &&fn) {
    const int64_t by_work = n * item_work * 16 / HP_MIN_CHUNK_WORK;
    const int64_t n_chunk = pool.chunks_for(std::min((n + align - 1) / align, by_work < 1 ? int64_t(1) : by_work));
    pool.run(n_chunk, [&](int64_t chunk, int thread) {
        int64_t begin, end;
        split_range(n, align, chunk, n_chunk, begin, end);
        if (begin < end) fn(begin, end, thread);
    });
}

// The layer stages (forward.cpp drives them in order).
void moe_layer(BaselineState &state, int layer, int64_t n_token, int32_t *expert_counts);

}  // namespace hp_cpu
