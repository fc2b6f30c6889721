// The CUDA reference's kernels: one plain kernel per operation of forward/cpu/reference, float32
// math and accumulation, one warp per output where there is a dot product. Each kernel names the
// CPU function it mirrors. Clarity over speed: no tiling, no fusion, no shared weights reuse.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <hotpass/forward_abi.h>

namespace hp_cuda_reference {

__device__ inline float load(hp_dtype dtype, const void *data, int64_t i) {
    switch (dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(data)[i];
        case HP_DTYPE_F16: return __half2float(static_cast<const __half *>(data)[i]);
        case HP_DTYPE_BF16: return __uint_as_float(uint32_t(static_cast<const uint16_t *>(data)[i]) << 16);
    }
    return __int_as_float(0x7fc00000);
}

// The CPU reference's f32_to_bf16 / f32_to_f16 bit recipes (round to nearest even).
__device__ inline uint16_t f32_to_bf16(float value) {
    uint32_t bits = __float_as_uint(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}
__device__ inline uint16_t f32_to_f16(float value) {
    const uint32_t bits = __float_as_uint(value);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
    if (abs_bits < 0x38800000u) return sign | uint16_t(__float2uint_rn(fabsf(value) * 16777216.0f));
    const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}
__device__ inline void store(hp_dtype dtype, void *data, int64_t i, float value) {
    switch (dtype) {
        case HP_DTYPE_F32: static_cast<float *>(data)[i] = value; break;
        case HP_DTYPE_F16: static_cast<uint16_t *>(data)[i] = f32_to_f16(value); break;
        case HP_DTYPE_BF16: static_cast<uint16_t *>(data)[i] = f32_to_bf16(value); break;
    }
}

__device__ inline float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ inline float block_sum(float value) {
    __shared__ float partial[32];
    __shared__ float total;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    value = warp_sum(value);
    __syncthreads();
    if (lane == 0) partial[warp] = value;
    __syncthreads();
    if (warp == 0) {
        float sum = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) total = sum;
    }
    __syncthreads();
    return total;
}

// x[t] = embed[token_ids[t]]. Grid: n_token blocks.
__global__ void embed_kernel(float *x, const int32_t *token_ids, hp_dtype dtype, const void *embed, int d_model) {
    const int t = blockIdx.x;
    const int64_t row = int64_t(token_ids[t]) * d_model;
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) x[int64_t(t) * d_model + i] = load(dtype, embed, row + i);
}

// rms_norm: y[r] = x[src] / sqrt(mean(x[src]^2) + eps) * weight, src = rows ? rows[r] : r.
// One block per row; may run in place (each thread rewrites only what it read).
__global__ void rms_norm_kernel(const float *x, int64_t x_stride, const int32_t *rows, float *y, int64_t y_stride, int n,
                                hp_dtype w_dtype, const void *weight, float eps) {
    const int r = blockIdx.x;
    const float *in = x + int64_t(rows ? rows[r] : r) * x_stride;
    float *out = y + int64_t(r) * y_stride;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += in[i] * in[i];
    sum_sq = block_sum(sum_sq);
    const float scale = 1.0f / sqrtf(sum_sq / float(n) + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i] * scale * load(w_dtype, weight, i);
}

// linear: y[r][o] = W[o] . x[r] (+ b[o]). One warp per output; grid (ceil(n_out / 8), n_row), 256 threads.
// With expert tables, W is expert_weights[expert_index[r * k + slot]] (one routed slot of MoE).
__global__ void linear_kernel(hp_dtype w_dtype, const void *w, const void *const *expert_weights, const int32_t *expert_index,
                              int slot, int k, hp_dtype b_dtype, const void *b, const float *x, int64_t x_stride, float *y,
                              int64_t y_stride, int n_out, int n_in) {
    const int o = blockIdx.x * 8 + threadIdx.x / 32, r = blockIdx.y, lane = threadIdx.x % 32;
    if (o >= n_out) return;
    const void *weights = expert_weights ? expert_weights[expert_index[int64_t(r) * k + slot]] : w;
    const float *in = x + int64_t(r) * x_stride;
    float sum = 0.0f;
    for (int i = lane; i < n_in; i += 32) sum += load(w_dtype, weights, int64_t(o) * n_in + i) * in[i];
    sum = warp_sum(sum);
    if (lane == 0) y[int64_t(r) * y_stride + o] = b ? sum + load(b_dtype, b, o) : sum;
}

// apply_rope on every head of every token: element i pairs with i + d_head/2.
// One thread per (row, i < d_head/2); rows are [n_token][n_head] heads of d_head.
__global__ void rope_kernel(float *heads, int n_row, int n_head, int d_head, const int32_t *positions, const float *inv_freq) {
    const int half = d_head / 2;
    const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (index >= int64_t(n_row) * half) return;
    const int64_t row = index / half;
    const int i = int(index % half);
    const float angle = float(positions[row / n_head]) * inv_freq[i];
    const float cos_a = cosf(angle), sin_a = sinf(angle);
    float *head = heads + row * d_head;
    const float first = head[i], second = head[i + half];
    head[i] = first * cos_a - second * sin_a;
    head[i + half] = second * cos_a + first * sin_a;
}

// token_seq[t] = the sequence owning token t. One thread per sequence.
__global__ void token_seq_kernel(const int32_t *seq_token_start, int n_seq, int32_t *token_seq) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_seq) return;
    for (int t = seq_token_start[s]; t < seq_token_start[s + 1]; ++t) token_seq[t] = s;
}

// kv_offset: element offset of position p's row [n_head_kv][d_head] in one layer's cache.
__device__ inline int64_t kv_offset(const int32_t *block_table, int block_tokens, int64_t row_width, int position) {
    return (int64_t(block_table[position / block_tokens]) * block_tokens + position % block_tokens) * row_width;
}

// Writes every token's k and v rows into the paged cache. Grid: n_token blocks.
__global__ void kv_store_kernel(const float *k, const float *v, int kv_width, const int32_t *positions, const int32_t *token_seq,
                                const int32_t *block_tables, int max_blocks, int block_tokens, hp_dtype kv_dtype, void *k_cache,
                                void *v_cache) {
    const int t = blockIdx.x;
    const int64_t offset = kv_offset(block_tables + int64_t(token_seq[t]) * max_blocks, block_tokens, kv_width, positions[t]);
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
        store(kv_dtype, k_cache, offset + i, k[int64_t(t) * kv_width + i]);
        store(kv_dtype, v_cache, offset + i, v[int64_t(t) * kv_width + i]);
    }
}

// attention: causal softmax(q k^T / sqrt(d_head)) v over positions [0, position] of the token's
// sequence, GQA head h reading kv head h / (n_head / n_head_kv). One warp per (head, token),
// three passes as the CPU (max, sum of exponentials, weighted sum); grid (n_head, n_token), 32 threads.
__global__ void attention_kernel(const float *q, float *out, int n_head, int n_head_kv, int d_head, const int32_t *positions,
                                 const int32_t *token_seq, const int32_t *block_tables, int max_blocks, int block_tokens,
                                 hp_dtype kv_dtype, const void *k_cache, const void *v_cache) {
    const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
    const int kv_head = h / (n_head / n_head_kv);
    const int64_t row_width = int64_t(n_head_kv) * d_head;
    const int32_t *block_table = block_tables + int64_t(token_seq[t]) * max_blocks;
    const float *q_head = q + (int64_t(t) * n_head + h) * d_head;
    const float scale = 1.0f / sqrtf(float(d_head));
    const int position = positions[t];
    auto score = [&](int p) {
        const int64_t base = kv_offset(block_table, block_tokens, row_width, p) + int64_t(kv_head) * d_head;
        float dot = 0.0f;
        for (int i = lane; i < d_head; i += 32) dot += q_head[i] * load(kv_dtype, k_cache, base + i);
        return warp_sum(dot) * scale;
    };
    float max_score = -INFINITY;
    for (int p = 0; p <= position; ++p) max_score = fmaxf(max_score, score(p));
    float total = 0.0f;
    for (int p = 0; p <= position; ++p) total += expf(score(p) - max_score);
    float *out_head = out + (int64_t(t) * n_head + h) * d_head;
    for (int i = lane; i < d_head; i += 32) out_head[i] = 0.0f;
    for (int p = 0; p <= position; ++p) {
        const float weight = expf(score(p) - max_score) / total;
        const int64_t base = kv_offset(block_table, block_tokens, row_width, p) + int64_t(kv_head) * d_head;
        for (int i = lane; i < d_head; i += 32) out_head[i] += weight * load(kv_dtype, v_cache, base + i);
    }
}

// x += delta, elementwise over n.
__global__ void add_kernel(float *x, const float *delta, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] += delta[i];
}

// gate = silu(gate) * up, elementwise over n.
__global__ void silu_mul_kernel(float *gate, const float *up, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

// moe routing: softmax over router logits (in place), top-k by probability (ties to the lower
// expert index, as torch.topk), weights renormalised when norm_topk_prob. One thread per token.
__global__ void route_kernel(float *probs, int n_token, int n_expert, int k, int norm_topk_prob, int32_t *expert_index,
                             float *expert_weight, int32_t *expert_counts) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_token) return;
    float *p = probs + int64_t(t) * n_expert;
    float max_logit = p[0];
    for (int e = 1; e < n_expert; ++e) max_logit = fmaxf(max_logit, p[e]);
    float total = 0.0f;
    for (int e = 0; e < n_expert; ++e) total += (p[e] = expf(p[e] - max_logit));
    for (int e = 0; e < n_expert; ++e) p[e] /= total;
    float chosen_total = 0.0f;
    for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < n_expert; ++e) {
            if (p[e] >= 0.0f && (best < 0 || p[e] > p[best])) best = e;
        }
        expert_index[t * k + j] = best;
        expert_weight[t * k + j] = p[best];
        chosen_total += p[best];
        p[best] = -1.0f;  // taken
        if (expert_counts) atomicAdd(expert_counts + best, 1);
    }
    if (norm_topk_prob) {
        for (int j = 0; j < k; ++j) expert_weight[t * k + j] = expert_weight[t * k + j] / chosen_total;
    }
}

// y[t] += weight[t] * src[t] over d_model; weight[t] = expert_weight[t * k + slot], or
// sigmoid(gate_logit[t]) for the shared expert (expert_weight == nullptr).
__global__ void weighted_add_kernel(float *y, const float *src, const float *expert_weight, int slot, int k,
                                    const float *gate_logit, int d_model) {
    const int t = blockIdx.x;
    const float weight = expert_weight ? expert_weight[t * k + slot] : 1.0f / (1.0f + expf(-gate_logit[t]));
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) y[int64_t(t) * d_model + i] += weight * src[int64_t(t) * d_model + i];
}

}  // namespace hp_cuda_reference
