// The CPU baseline forward pass: the reference's math (forward/cpu/reference/forward.cpp), fast.
// Same stages in the same order per layer -- rms_norm, q/k/v linear, q/k norm, rope, KV write,
// attention, o_proj + residual, rms_norm, gated MLP or MoE + residual -- but each stage runs over
// the whole batch on a persistent thread pool, weights stay in their stored dtype and are read once
// per stage for all tokens, and the residual add and the SiLU gate are fused into the matmuls
// (knobs HP_FUSE_RESIDUAL, HP_FUSE_GATE). Depends on the ABI header only.
#include <hotpass/forward_abi.h>

#include <algorithm>
#include <new>

#include "attention.h"
#include "knobs.h"
#include "matmul.h"
#include "norm_rope.h"
#include "simd.h"
#include "state.h"

namespace hp_cpu {
namespace {

const hp_tensor kNone{};
constexpr int kMaxHalfHead = 512;  // d_head <= 1024

// Rejects batches that would make the pass read or write out of bounds (as the reference does).
bool batch_is_valid(const hp_model &model, const hp_batch &batch) {
    const hp_config &c = model.config;
    if (batch.n_token < 0 || batch.n_seq < 0 || batch.n_logit_row < 0) return false;
    if (batch.seq_token_start[0] != 0 || batch.seq_token_start[batch.n_seq] != batch.n_token) return false;
    for (int s = 0; s < batch.n_seq; ++s) {
        const int begin = batch.seq_token_start[s], end = batch.seq_token_start[s + 1];
        if (end < begin) return false;
        for (int t = begin; t < end; ++t) {
            const int position = batch.positions[t];
            if (batch.token_ids[t] < 0 || batch.token_ids[t] >= c.n_vocab || position < 0) return false;
            if (t > begin && position != batch.positions[t - 1] + 1) return false;
            if (position / model.kv->block_tokens >= batch.max_blocks_per_seq) return false;
            for (int p = 0; p <= position; p += model.kv->block_tokens) {
                const int block = batch.block_tables[int64_t(s) * batch.max_blocks_per_seq + p / model.kv->block_tokens];
                if (block < 0 || block >= model.kv->n_block) return false;
            }
        }
    }
    for (int r = 0; r < batch.n_logit_row; ++r) {
        if (batch.logit_rows[r] < 0 || batch.logit_rows[r] >= batch.n_token) return false;
    }
    return true;
}

bool model_is_supported(const hp_model &model) {
    const hp_config &c = model.config;
    if (model.device != HP_DEVICE_CPU || !model.kv) return false;
    if (c.n_head <= 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0 || c.d_head % 2 != 0) return false;
    if (c.d_head > 2 * kMaxHalfHead || c.n_expert > 256) return false;
    if (c.n_expert > 0 && (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)) return false;
    return true;
}

// Carves the step's buffers from `base` (or only measures them when base is NULL); returns bytes.
size_t layout_step(const hp_config &c, int64_t n, int64_t n_logit, char *base, StepBuffers &b) {
    size_t offset = 0;
    auto take = [&]<typename T>(T *&ptr, int64_t count) {
        offset = (offset + 63) / 64 * 64;
        if (base) ptr = reinterpret_cast<T *>(base + offset);
        offset += size_t(std::max<int64_t>(count, 1)) * sizeof(T);
    };
    const int64_t d = c.d_model, qw = int64_t(c.n_head) * c.d_head, kw = int64_t(c.n_head_kv) * c.d_head;
    const int64_t e = n * c.n_expert_used;
    take(b.x, n * d);
    take(b.h, n * d);
    take(b.q, n * qw);
    take(b.k, n * kw);
    take(b.v, n * kw);
    take(b.attn, n * qw);
    take(b.ff_a, n * c.d_ff);
    take(b.ff_b, n * c.d_ff);
    take(b.delta, n * d);
    take(b.logit_h, n_logit * d);
    take(b.block_table, n);
    if (c.n_expert > 0) {
        take(b.router, n * c.n_expert);
        take(b.entry_token, e);
        take(b.entry_weight, e);
        take(b.token_entry, e);
        take(b.expert_begin, c.n_expert + 1);
        take(b.expert_a, e * c.d_ff_expert);
        take(b.expert_b, e * c.d_ff_expert);
        take(b.expert_out, e * d);
        take(b.shared_gate, n);
        take(b.shared_a, n * c.d_ff_shared_expert);
        take(b.shared_b, n * c.d_ff_shared_expert);
        take(b.shared_out, n * d);
    }
    return offset;
}

// The widest input of any matmul: d_model, the attention output, or an MLP's hidden width.
int64_t max_matmul_input(const hp_config &c) {
    return std::max({int64_t(c.d_model), int64_t(c.n_head) * c.d_head, int64_t(c.d_ff), int64_t(c.d_ff_expert),
                     int64_t(c.d_ff_shared_expert)});
}

float *widen_copy(BaselineState &state, const hp_tensor &tensor, int64_t n) {
    if (!tensor.data) return nullptr;
    auto *copy = static_cast<float *>(state.alloc(size_t(n) * sizeof(float)));
    if (copy) widen_any(tensor.dtype, tensor.data, n, copy);
    return copy;
}

void destroy_state(BaselineState *state) {
    delete state->pool;
    if (state->norms) {
        for (int l = 0; l < state->model->config.n_layer; ++l) {
            state->release(state->norms[l].attn_norm);
            state->release(state->norms[l].ffn_norm);
            state->release(state->norms[l].q_norm);
            state->release(state->norms[l].k_norm);
        }
    }
    if (state->matmul_scratch) {
        for (int t = 0; t < state->n_thread; ++t) {
            state->release(state->matmul_scratch[t].w_pack);
            state->release(state->matmul_scratch[t].x_pack);
            state->release(state->matmul_scratch[t].x_split);
        }
    }
    for (void *ptr : {static_cast<void *>(state->norms), static_cast<void *>(state->matmul_scratch), static_cast<void *>(state->inv_freq),
                      static_cast<void *>(state->output_norm), static_cast<void *>(state->attention_scratch), state->arena}) {
        state->release(ptr);
    }
    hp_services services = state->services;
    state->~BaselineState();
    services.free(services.ctx, state);
}

int baseline_create(const hp_model *model, const hp_services *services, void **out_state) {
    if (!model_is_supported(*model)) return HP_ERR_UNSUPPORTED;
    void *memory = services->alloc(services->ctx, sizeof(BaselineState), 64);
    if (!memory) return HP_ERR_OUT_OF_MEMORY;
    auto *state = new (memory) BaselineState();
    state->model = model;
    state->services = *services;
    const hp_config &c = model->config;
    const int n_thread = std::max(1, std::min(services->n_thread, HP_MAX_THREADS));
    state->n_thread = n_thread;

    bool ok = true;
    state->inv_freq = static_cast<float *>(state->alloc(size_t(c.d_head / 2 + 1) * sizeof(float)));
    state->norms = static_cast<LayerNorms *>(state->alloc(sizeof(LayerNorms) * size_t(std::max(c.n_layer, 1))));
    state->matmul_scratch = static_cast<MatmulScratch *>(state->alloc(sizeof(MatmulScratch) * size_t(n_thread)));
    state->attention_stride = (attention_scratch_floats(c) + 15) / 16 * 16;
    state->attention_scratch = static_cast<float *>(state->alloc(size_t(state->attention_stride * n_thread) * sizeof(float)));
    if (state->norms) {
        for (int l = 0; l < c.n_layer; ++l) new (&state->norms[l]) LayerNorms();
    }
    if (state->matmul_scratch) {
        for (int t = 0; t < n_thread; ++t) new (&state->matmul_scratch[t]) MatmulScratch();
    }
    ok = state->inv_freq && state->norms && state->matmul_scratch && state->attention_scratch;
    if (ok) {
        rope_inv_freq(c, state->inv_freq);
        for (int l = 0; l < c.n_layer && ok; ++l) {
            const hp_layer &w = model->layers[l];
            LayerNorms &norms = state->norms[l];
            norms.attn_norm = widen_copy(*state, w.attn_norm, c.d_model);
            norms.ffn_norm = widen_copy(*state, w.ffn_norm, c.d_model);
            if (c.has_qk_norm) {
                norms.q_norm = widen_copy(*state, w.q_norm, c.d_head);
                norms.k_norm = widen_copy(*state, w.k_norm, c.d_head);
                ok = norms.q_norm && norms.k_norm;
            }
            ok = ok && norms.attn_norm && norms.ffn_norm;
        }
        state->output_norm = widen_copy(*state, model->output_norm, c.d_model);
        ok = ok && state->output_norm;
        for (int t = 0; t < n_thread && ok; ++t) {
            state->matmul_scratch[t].w_pack = static_cast<float *>(state->alloc(size_t(matmul_w_pack_floats()) * sizeof(float)));
            state->matmul_scratch[t].x_pack = static_cast<float *>(state->alloc(size_t(matmul_x_pack_floats()) * sizeof(float)));
            ok = state->matmul_scratch[t].w_pack && state->matmul_scratch[t].x_pack;
            if (ok && matmul_split_tokens() > 0) {
                MatmulScratch &scratch = state->matmul_scratch[t];
                scratch.x_split_floats = matmul_split_tokens() * max_matmul_input(c);
                scratch.x_split = static_cast<float *>(state->alloc(size_t(scratch.x_split_floats) * sizeof(float)));
                ok = scratch.x_split != nullptr;
            }
        }
    }
    if (!ok) {
        destroy_state(state);
        return HP_ERR_OUT_OF_MEMORY;
    }
    state->pool = new (std::nothrow) ThreadPool(n_thread);
    if (!state->pool) {
        destroy_state(state);
        return HP_ERR_OUT_OF_MEMORY;
    }
    *out_state = state;
    return HP_OK;
}

// x[t] = token_embd[token_ids[t]]
void embed(BaselineState &state, const hp_batch &batch) {
    const hp_model &model = *state.model;
    const int64_t d = model.config.d_model;
    const size_t element = model.token_embd.dtype == HP_DTYPE_F32 ? 4 : 2;
    parallel_range(*state.pool, batch.n_token, 1, d, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t t = begin; t < end; ++t) {
            const char *row = static_cast<const char *>(model.token_embd.data) + int64_t(batch.token_ids[t]) * d * int64_t(element);
            widen_any(model.token_embd.dtype, row, d, state.buf.x + t * d);
        }
    });
}

// h[t] = rms_norm(x[t]) * weight for every token.
void norm_tokens(BaselineState &state, const float *x, const int32_t *rows, int64_t n, const float *weight, float *h) {
    const int64_t d = state.model->config.d_model;
    const float eps = state.model->config.norm_eps;
    parallel_range(*state.pool, n, 1, d, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t t = begin; t < end; ++t) rms_norm(x + (rows ? int64_t(rows[t]) : t) * d, weight, eps, d, h + t * d);
    });
}

// q, k, v projections; q/k norm and RoPE; K and V rows into the paged cache; attention; o_proj
// added into the residual stream.
void attention_block(BaselineState &state, int layer, const hp_batch &batch) {
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    const hp_layer &w = model.layers[layer];
    const StepBuffers &b = state.buf;
    const int64_t n = batch.n_token, d = c.d_model;
    const int64_t qw = int64_t(c.n_head) * c.d_head, kw = int64_t(c.n_head_kv) * c.d_head;
    ThreadPool &pool = *state.pool;

    norm_tokens(state, b.x, nullptr, n, state.norms[layer].attn_norm, b.h);
    const MatmulInput in{b.h, d, nullptr, n};
    pool.run(row_chunks(pool, qw + 2 * kw, n, d), [&, n_chunk = row_chunks(pool, qw + 2 * kw, n, d)](int64_t chunk, int thread) {
        int64_t begin, end;
        chunk_rows(qw, n, chunk, n_chunk, begin, end);
        matmul_rows(w.wq, w.bq, in, begin, end, {b.q, qw, false}, state.matmul_scratch[thread]);
        chunk_rows(kw, n, chunk, n_chunk, begin, end);
        matmul_rows(w.wk, w.bk, in, begin, end, {b.k, kw, false}, state.matmul_scratch[thread]);
        matmul_rows(w.wv, w.bv, in, begin, end, {b.v, kw, false}, state.matmul_scratch[thread]);
    });
    parallel_range(pool, n, 1, qw + 2 * kw, [&](int64_t begin, int64_t end, int thread) {
        const int half = c.d_head / 2;
        float cos_a[kMaxHalfHead], sin_a[kMaxHalfHead];
        const hp_kv_cache &kv = *model.kv;
        for (int64_t t = begin; t < end; ++t) {
            const int position = batch.positions[t];
            rope_angles(state.inv_freq, half, position, cos_a, sin_a);
            float *q_t = b.q + t * qw, *k_t = b.k + t * kw;
            for (int head = 0; head < c.n_head; ++head) {
                float *q_head = q_t + int64_t(head) * c.d_head;
                if (c.has_qk_norm) rms_norm(q_head, state.norms[layer].q_norm, c.norm_eps, c.d_head, q_head);
                apply_rope(q_head, c.d_head, cos_a, sin_a);
            }
            for (int head = 0; head < c.n_head_kv; ++head) {
                float *k_head = k_t + int64_t(head) * c.d_head;
                if (c.has_qk_norm) rms_norm(k_head, state.norms[layer].k_norm, c.norm_eps, c.d_head, k_head);
                apply_rope(k_head, c.d_head, cos_a, sin_a);
            }
            const int32_t *table = b.block_table[t];
            const int64_t offset = (int64_t(table[position / kv.block_tokens]) * kv.block_tokens + position % kv.block_tokens) * kw;
            for (int64_t i = 0; i < kw; ++i) {
                store_any(kv.dtype, kv.k[layer], offset + i, k_t[i]);
                store_any(kv.dtype, kv.v[layer], offset + i, b.v[t * kw + i]);
            }
        }
    });
    // One chunk per (token, kv head): costs differ with the position, so threads claim them.
    pool.run(n * c.n_head_kv, [&](int64_t item, int thread) {
        float *scratch = state.attention_scratch + thread * state.attention_stride;
        const int64_t t = item / c.n_head_kv;
        const int kv_head = int(item % c.n_head_kv);
        attention_group(model, layer, b.block_table[t], batch.positions[t], kv_head, b.q + t * qw, b.attn + t * qw, scratch);
    });
    const MatmulInput attn_in{b.attn, qw, nullptr, n};
    pool.run(row_chunks(pool, d, n, qw), [&, n_chunk = row_chunks(pool, d, n, qw)](int64_t chunk, int thread) {
        int64_t begin, end;
        chunk_rows(d, n, chunk, n_chunk, begin, end);
        if (HP_FUSE_RESIDUAL) {
            matmul_rows(w.wo, w.bo, attn_in, begin, end, {b.x, d, true}, state.matmul_scratch[thread]);
        } else {
            matmul_rows(w.wo, w.bo, attn_in, begin, end, {b.delta, d, false}, state.matmul_scratch[thread]);
        }
    });
    if (!HP_FUSE_RESIDUAL) {
        parallel_range(pool, n * d, 64, 1, [&](int64_t begin, int64_t end, int thread) {
            for (int64_t i = begin; i < end; ++i) b.x[i] += b.delta[i];
        });
    }
}

// x += down(silu(gate(h)) * up(h)) over the dense MLP.
void dense_mlp(BaselineState &state, int layer, int64_t n) {
    const hp_config &c = state.model->config;
    const hp_layer &w = state.model->layers[layer];
    const StepBuffers &b = state.buf;
    const int64_t d = c.d_model, ff = c.d_ff;
    ThreadPool &pool = *state.pool;
    const MatmulInput in{b.h, d, nullptr, n};
    if (HP_FUSE_GATE) {
        pool.run(row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1)), [&, n_chunk = row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1))](int64_t chunk, int thread) {
            int64_t begin, end;
            chunk_rows(ff, n, chunk, n_chunk, begin, end);
            matmul_rows(w.w_gate, w.b_gate, in, begin, end, {b.ff_a, ff, false}, state.matmul_scratch[thread]);
            matmul_rows(w.w_up, w.b_up, in, begin, end, {b.ff_b, ff, false}, state.matmul_scratch[thread]);
            for (int64_t t = 0; t < n; ++t) silu_mul(b.ff_a + t * ff + begin, b.ff_b + t * ff + begin, end - begin);
        });
    } else {
        pool.run(row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1)), [&, n_chunk = row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1))](int64_t chunk, int thread) {
            int64_t begin, end;
            chunk_rows(ff, n, chunk, n_chunk, begin, end);
            matmul_rows(w.w_gate, w.b_gate, in, begin, end, {b.ff_a, ff, false}, state.matmul_scratch[thread]);
        });
        pool.run(row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1)), [&, n_chunk = row_chunks(pool, ff, n, d * (HP_FUSE_GATE ? 2 : 1))](int64_t chunk, int thread) {
            int64_t begin, end;
            chunk_rows(ff, n, chunk, n_chunk, begin, end);
            matmul_rows(w.w_up, w.b_up, in, begin, end, {b.ff_b, ff, false}, state.matmul_scratch[thread]);
        });
        parallel_range(pool, n, 1, ff, [&](int64_t begin, int64_t end, int thread) {
            for (int64_t t = begin; t < end; ++t) silu_mul(b.ff_a + t * ff, b.ff_b + t * ff, ff);
        });
    }
    const MatmulInput ff_in{b.ff_a, ff, nullptr, n};
    pool.run(row_chunks(pool, d, n, ff), [&, n_chunk = row_chunks(pool, d, n, ff)](int64_t chunk, int thread) {
        int64_t begin, end;
        chunk_rows(d, n, chunk, n_chunk, begin, end);
        if (HP_FUSE_RESIDUAL) {
            matmul_rows(w.w_down, w.b_down, ff_in, begin, end, {b.x, d, true}, state.matmul_scratch[thread]);
        } else {
            matmul_rows(w.w_down, w.b_down, ff_in, begin, end, {b.delta, d, false}, state.matmul_scratch[thread]);
        }
    });
    if (!HP_FUSE_RESIDUAL) {
        parallel_range(pool, n * d, 64, 1, [&](int64_t begin, int64_t end, int thread) {
            for (int64_t i = begin; i < end; ++i) b.x[i] += b.delta[i];
        });
    }
}

int baseline_forward(void *opaque, const hp_batch *batch, hp_output *out) {
    BaselineState &state = *static_cast<BaselineState *>(opaque);
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    if (!batch_is_valid(model, *batch)) return HP_ERR_INVALID;
    const int64_t n = batch->n_token, d = c.d_model;
    if (n == 0) return HP_OK;

    StepBuffers measured;
    const size_t bytes = layout_step(c, n, batch->n_logit_row, nullptr, measured);
    if (bytes > state.arena_bytes) {
        const size_t grown = std::max(bytes, state.arena_bytes * 3 / 2);
        state.release(state.arena);
        state.arena_bytes = 0;
        state.arena = state.alloc(grown);
        if (!state.arena) return HP_ERR_OUT_OF_MEMORY;
        state.arena_bytes = grown;
    }
    layout_step(c, n, batch->n_logit_row, static_cast<char *>(state.arena), state.buf);
    for (int s = 0; s < batch->n_seq; ++s) {
        for (int t = batch->seq_token_start[s]; t < batch->seq_token_start[s + 1]; ++t) {
            state.buf.block_table[t] = batch->block_tables + int64_t(s) * batch->max_blocks_per_seq;
        }
    }

    embed(state, *batch);
    for (int layer = 0; layer < c.n_layer; ++layer) {
        attention_block(state, layer, *batch);
        norm_tokens(state, state.buf.x, nullptr, n, state.norms[layer].ffn_norm, state.buf.h);
        if (model.layers[layer].is_moe) moe_layer(state, layer, n, out->expert_counts);
        else dense_mlp(state, layer, n);
    }
    const int64_t n_logit = batch->n_logit_row;
    norm_tokens(state, state.buf.x, batch->logit_rows, n_logit, state.output_norm, state.buf.logit_h);
    const MatmulInput in{state.buf.logit_h, d, nullptr, n_logit};
    state.pool->run(row_chunks(*state.pool, c.n_vocab, n_logit, d), [&, n_chunk = row_chunks(*state.pool, c.n_vocab, n_logit, d)](int64_t chunk, int thread) {
        int64_t begin, end;
        chunk_rows(c.n_vocab, n_logit, chunk, n_chunk, begin, end);
        matmul_rows(model.lm_head, kNone, in, begin, end, {out->logits, c.n_vocab, false}, state.matmul_scratch[thread]);
    });
    return HP_OK;
}

void baseline_destroy(void *opaque) { destroy_state(static_cast<BaselineState *>(opaque)); }

const hp_forward_vtable kVtable = {HP_FORWARD_ABI_VERSION, "cpu-baseline", baseline_create, baseline_forward,
                                   baseline_destroy};

}  // namespace
}  // namespace hp_cpu

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &hp_cpu::kVtable; }
