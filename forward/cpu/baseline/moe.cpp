// Mixture-of-experts layer: router softmax, top-k (ties to the lower expert index, as torch.topk),
// optional renormalisation, then tokens grouped by expert so each selected expert's weights are
// streamed once for all of its tokens and unselected experts are never read; plus the
// sigmoid-gated shared expert. Combination order per token matches the reference: chosen experts
// in decreasing probability, then the shared expert, then one add into the residual stream.
#include <algorithm>
#include <cmath>

#include "matmul.h"
#include "norm_rope.h"
#include "state.h"

namespace hp_cpu {
namespace {

const hp_tensor kNone{};

// Softmax + top-k per token; fills the entry lists grouped by expert.
void route(BaselineState &state, int layer, int64_t n, int32_t *expert_counts) {
    const hp_config &c = state.model->config;
    const StepBuffers &b = state.buf;
    const int n_expert = c.n_expert, top_k = c.n_expert_used;
    int order[256];
    int32_t *count = b.expert_begin;  // counts first, prefix sums below
    std::fill(count, count + n_expert + 1, 0);
    for (int64_t t = 0; t < n; ++t) {
        float *probs = b.router + t * n_expert;
        const float max_logit = *std::max_element(probs, probs + n_expert);
        float total = 0.0f;
        for (int e = 0; e < n_expert; ++e) total += (probs[e] = std::exp(probs[e] - max_logit));
        for (int e = 0; e < n_expert; ++e) probs[e] /= total;
        for (int e = 0; e < n_expert; ++e) order[e] = e;
        std::stable_sort(order, order + n_expert, [&](int x, int y) { return probs[x] > probs[y]; });
        for (int j = 0; j < top_k; ++j) {
            count[order[j] + 1] += 1;
            b.token_entry[t * top_k + j] = order[j];  // the expert for now; its entry below
        }
    }
    for (int e = 0; e < n_expert; ++e) count[e + 1] += count[e];
    int32_t fill[256];
    std::copy(count, count + n_expert, fill);
    for (int64_t t = 0; t < n; ++t) {
        const float *probs = b.router + t * n_expert;
        float chosen_total = 0.0f;
        for (int j = 0; j < top_k; ++j) chosen_total += probs[b.token_entry[t * top_k + j]];
        for (int j = 0; j < top_k; ++j) {
            const int e = b.token_entry[t * top_k + j];
            const int32_t entry = fill[e]++;
            b.entry_token[entry] = int32_t(t);
            b.entry_weight[entry] = c.norm_topk_prob ? probs[e] / chosen_total : probs[e];
            b.token_entry[t * top_k + j] = entry;
            if (expert_counts) expert_counts[int64_t(layer) * n_expert + e] += 1;
        }
    }
}

}  // namespace

void moe_layer(BaselineState &state, int layer, int64_t n, int32_t *expert_counts) {
    const hp_config &c = state.model->config;
    const hp_layer &w = state.model->layers[layer];
    const StepBuffers &b = state.buf;
    ThreadPool &pool = *state.pool;
    const int64_t d = c.d_model, ff = c.d_ff_expert, ffs = c.d_ff_shared_expert;
    const bool shared = w.shared_gate.data != nullptr;
    const MatmulInput in{b.h, d, nullptr, n};

    pool.run(row_chunks(pool, c.n_expert, n, d), [&, n_chunk = row_chunks(pool, c.n_expert, n, d)](int64_t chunk, int thread) {
        int64_t begin, end;
        chunk_rows(c.n_expert, n, chunk, n_chunk, begin, end);
        matmul_rows(w.router, kNone, in, begin, end, {b.router, c.n_expert, false}, state.matmul_scratch[thread]);
        if (shared && w.shared_expert_gate.data) {
            chunk_rows(1, n, chunk, n_chunk, begin, end);
            matmul_rows(w.shared_expert_gate, kNone, in, begin, end, {b.shared_gate, 1, false}, state.matmul_scratch[thread]);
        }
    });
    route(state, layer, n, expert_counts);

    // gate/up and SiLU for every selected expert's tokens (and the shared expert's), row-split.
    const int64_t n_chunk_ff = pool.chunks_for(std::min((std::max(ff, ffs) + 15) / 16, std::max<int64_t>(1, 2 * d * (n * c.n_expert_used * ff + n * ffs) / HP_MIN_CHUNK_WORK)));
    pool.run(n_chunk_ff, [&, n_chunk = n_chunk_ff](int64_t chunk, int thread) {
        for (int e = 0; e < c.n_expert; ++e) {
            const int64_t first = b.expert_begin[e], count = b.expert_begin[e + 1] - first;
            if (count == 0) continue;
            const MatmulInput expert_in{b.h, d, b.entry_token + first, count};
            int64_t begin, end;
            chunk_rows(ff, count, chunk, n_chunk, begin, end);
            float *a = b.expert_a + first * ff, *up = b.expert_b + first * ff;
            matmul_rows(w.expert_gate[e], kNone, expert_in, begin, end, {a, ff, false}, state.matmul_scratch[thread]);
            matmul_rows(w.expert_up[e], kNone, expert_in, begin, end, {up, ff, false}, state.matmul_scratch[thread]);
            for (int64_t i = 0; i < count; ++i) silu_mul(a + i * ff + begin, up + i * ff + begin, end - begin);
        }
        if (shared) {
            int64_t begin, end;
            chunk_rows(ffs, n, chunk, n_chunk, begin, end);
            matmul_rows(w.shared_gate, kNone, in, begin, end, {b.shared_a, ffs, false}, state.matmul_scratch[thread]);
            matmul_rows(w.shared_up, kNone, in, begin, end, {b.shared_b, ffs, false}, state.matmul_scratch[thread]);
            for (int64_t t = 0; t < n; ++t) silu_mul(b.shared_a + t * ffs + begin, b.shared_b + t * ffs + begin, end - begin);
        }
    });
    const int64_t n_chunk_d = pool.chunks_for(std::min((d + 15) / 16, std::max<int64_t>(1, d * (n * c.n_expert_used * ff + n * ffs) / HP_MIN_CHUNK_WORK)));
    pool.run(n_chunk_d, [&, n_chunk = n_chunk_d](int64_t chunk, int thread) {
        for (int e = 0; e < c.n_expert; ++e) {
            const int64_t first = b.expert_begin[e], count = b.expert_begin[e + 1] - first;
            if (count == 0) continue;
            const MatmulInput expert_in{b.expert_a + first * ff, ff, nullptr, count};
            int64_t begin, end;
            chunk_rows(d, count, chunk, n_chunk, begin, end);
            matmul_rows(w.expert_down[e], kNone, expert_in, begin, end, {b.expert_out + first * d, d, false},
                        state.matmul_scratch[thread]);
        }
        if (shared) {
            const MatmulInput shared_in{b.shared_a, ffs, nullptr, n};
            int64_t begin, end;
            chunk_rows(d, n, chunk, n_chunk, begin, end);
            matmul_rows(w.shared_down, kNone, shared_in, begin, end, {b.shared_out, d, false}, state.matmul_scratch[thread]);
        }
    });
    // x[t] += sum_j weight_j * expert_out[entry_j] (+ sigmoid(gate) * shared_out[t])
    parallel_range(pool, n, 1, d * (c.n_expert_used + 1), [&](int64_t begin, int64_t end, int thread) {
        for (int64_t t = begin; t < end; ++t) {
            float *y = b.delta + t * d;
            std::fill(y, y + d, 0.0f);
            for (int j = 0; j < c.n_expert_used; ++j) {
                const int32_t entry = b.token_entry[t * c.n_expert_used + j];
                const float weight = b.entry_weight[entry];
                const float *expert_out = b.expert_out + int64_t(entry) * d;
                for (int64_t i = 0; i < d; ++i) y[i] += weight * expert_out[i];
            }
            if (shared) {
                const float gate = w.shared_expert_gate.data ? 1.0f / (1.0f + std::exp(-b.shared_gate[t])) : 1.0f;
                const float *shared_out = b.shared_out + t * d;
                for (int64_t i = 0; i < d; ++i) y[i] += gate * shared_out[i];
            }
            float *x = b.x + t * d;
            for (int64_t i = 0; i < d; ++i) x[i] += y[i];
        }
    });
}

}  // namespace hp_cpu
