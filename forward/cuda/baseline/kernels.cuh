// The CUDA baseline's own kernels besides the projections (gemv.cuh for decode steps, cuBLAS
// otherwise): fused RMSNorm -> bf16, the per-head bias + q/k norm + RoPE + KV-cache write, split-KV
// paged decode attention and its reduction, SiLU gating, MoE routing, routed-expert GEMVs and their
// weighted sum. Float32 math; bf16 only where a projection input or a cache element is stored.
// Mirrors forward/cuda/reference's operations. The per-layer kernels wait for the previous kernel
// with griddepcontrol.wait (a no-op unless launched as programmatic dependents, knob pdl).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <hotpass/forward_abi.h>

#include "gemv.cuh"
#include "knobs.h"

namespace hp_cuda_baseline {

constexpr int kMaxGroup = 8;     // query heads per kv head handled by one attention block
constexpr int kMaxHeadDim = 256; // d_head limit of the attention and rope kernels (head_kernel: one thread per element)

__device__ inline float load(hp_dtype dtype, const void *data, int64_t i) {
    switch (dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(data)[i];
        case HP_DTYPE_F16: return __half2float(static_cast<const __half *>(data)[i]);
        case HP_DTYPE_BF16: return __uint_as_float(uint32_t(static_cast<const uint16_t *>(data)[i]) << 16);
    }
    return __int_as_float(0x7fc00000);
}

template <hp_dtype D>
__device__ inline float load_as(const void *data, int64_t i) {
    if constexpr (D == HP_DTYPE_F32) return static_cast<const float *>(data)[i];
    else if constexpr (D == HP_DTYPE_F16) return __half2float(static_cast<const __half *>(data)[i]);
    else return __uint_as_float(uint32_t(static_cast<const uint16_t *>(data)[i]) << 16);
}

template <hp_dtype D>
__device__ inline void store_as(void *data, int64_t i, float value) {
    if constexpr (D == HP_DTYPE_F32) static_cast<float *>(data)[i] = value;
    else if constexpr (D == HP_DTYPE_F16) static_cast<__half *>(data)[i] = __float2half_rn(value);
    else static_cast<__nv_bfloat16 *>(data)[i] = __float2bfloat16_rn(value);
}

__device__ inline float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

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

// Any-dtype weight -> bf16 copy (derived layouts of f32/f16 checkpoints).
__global__ void to_bf16_kernel(hp_dtype dtype, const void *in, __nv_bfloat16 *out, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        out[i] = __float2bfloat16_rn(load(dtype, in, i));
    }
}

__global__ void embed_kernel(float *x, const int32_t *token_ids, hp_dtype dtype, const void *embed, int d_model) {
    const int t = blockIdx.x;
    const int64_t row = int64_t(token_ids[t]) * d_model;
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) x[int64_t(t) * d_model + i] = load(dtype, embed, row + i);
}

// out[r] = bf16(x[src] / sqrt(mean(x[src]^2) + eps) * weight), src = rows ? rows[r] : r.
__global__ void __launch_bounds__(HP_CUDA_NORM_THREADS) rms_norm_bf16_kernel(const float *x, const int32_t *rows, __nv_bfloat16 *out,
                                                                            int n, hp_dtype w_dtype, const void *weight, float eps) {
    hp_cuda_gemv::launch_dependents();  // the GEMV after it may start streaming its weights
    hp_cuda_gemv::wait_for_previous_grid();
    const int r = blockIdx.x;
    const float *in = x + int64_t(rows ? rows[r] : r) * n;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += in[i] * in[i];
    sum_sq = block_sum(sum_sq);
    const float scale = rsqrtf(sum_sq / float(n) + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[int64_t(r) * n + i] = __float2bfloat16_rn(in[i] * scale * load(w_dtype, weight, i));
}

// RMSNorm with the row in registers (knob norm_vec): out[r] = bf16(x[src] / sqrt(mean(x[src]^2) + eps) * weight)
// as rms_norm_bf16_kernel, each thread holding kChunks chunks of 4 elements (element 4 (c * blockDim.x + thread)
// onwards of chunk c), so that a row is read once by 16-byte loads all in flight together, and the norm weight is
// read before the wait (the plugin's, constant). Needs n % 4 == 0, x and out 16- and 8-byte aligned, and
// n <= 4 * kChunks * blockDim.x (launch_rms_norm checks).
// kSource kNormFromEmbedding: the first layer's norm with the embedding lookup and the token -> sequence map folded
// in (one launch for what token_seq_kernel, embed_kernel and this kernel do): row r is embedding row token_ids[r],
// also written to x[r]; with seq_token_start, thread s of the grid writes token_seq for sequence s's tokens.
// kSource kNormFromResidual: the residual add of a projection split along its inputs folded in (knob gemm_split_k):
// x[r] += the sum of its partial products (slices in order) + bias, written back, then normalised.
enum NormSource : int { kNormFromX = 0, kNormFromEmbedding = 1, kNormFromResidual = 2 };

struct NormEmbed {
    const int32_t *token_ids = nullptr;
    hp_dtype dtype = HP_DTYPE_BF16;
    const void *table = nullptr;
    const int32_t *seq_token_start = nullptr;  // optional: [n_seq + 1]
    int n_seq = 0;
    int32_t *token_seq = nullptr;
};

struct NormResidual {
    const float *partials = nullptr;  // [n_partial][n_row][n]
    int n_partial = 0;
    hp_dtype bias_dtype = HP_DTYPE_F32;
    const void *bias = nullptr;       // optional: [n]
};

// x[r] += bias + the partials' rows r (summed in that order, as rms_norm_rows_kernel does): the residual add where
// that kernel cannot take the shape.
__global__ void add_partials_kernel(float *x, int n, int n_row, NormResidual residual) {
    hp_cuda_gemv::wait_for_previous_grid();
    const int64_t total = int64_t(n) * n_row;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float sum = residual.bias ? load(residual.bias_dtype, residual.bias, i % n) : 0.0f;
        for (int s = 0; s < residual.n_partial; ++s) sum += residual.partials[int64_t(s) * total + i];
        x[i] += sum;
    }
}

// Elements i .. i + 3 of the row of n elements at `row` of `data` (any dtype) as a float4; zeros where i is past
// the row.
__device__ inline float4 load4_or_zero(hp_dtype dtype, const void *data, int64_t row, int i, int n) {
    if (i >= n) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int64_t at = row + i;
    return make_float4(load(dtype, data, at), load(dtype, data, at + 1), load(dtype, data, at + 2), load(dtype, data, at + 3));
}

template <int kChunks, int kSource>
__global__ void __launch_bounds__(HP_CUDA_NORM_THREADS) rms_norm_rows_kernel(float *x, const int32_t *rows, __nv_bfloat16 *out, int n,
                                                                             hp_dtype w_dtype, const void *weight, float eps, NormEmbed embed,
                                                                             NormResidual residual) {
    constexpr bool kEmbed = kSource == kNormFromEmbedding;
    // The first element of this thread's chunk c of a row.
    const auto first = [](int c) { return (c * int(blockDim.x) + int(threadIdx.x)) * 4; };
    hp_cuda_gemv::launch_dependents();  // the GEMV after it may start streaming its weights
    float4 w[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) w[c] = load4_or_zero(w_dtype, weight, 0, first(c), n);
    hp_cuda_gemv::wait_for_previous_grid();
    const int r = blockIdx.x;
    if constexpr (kEmbed) {
        if (embed.seq_token_start) {
            const int s = int(blockIdx.x * blockDim.x + threadIdx.x);
            if (s < embed.n_seq) {
                for (int t = embed.seq_token_start[s]; t < embed.seq_token_start[s + 1]; ++t) embed.token_seq[t] = s;
            }
        }
    }
    float4 v[kChunks];
    if constexpr (kEmbed) {
        const int64_t src = int64_t(embed.token_ids[r]) * n;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
            v[c] = load4_or_zero(embed.dtype, embed.table, src, first(c), n);
            if (first(c) < n) *reinterpret_cast<float4 *>(x + int64_t(r) * n + first(c)) = v[c];
        }
    } else {
        const float *in = x + int64_t(rows ? rows[r] : r) * n;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) v[c] = first(c) < n ? *reinterpret_cast<const float4 *>(in + first(c)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if constexpr (kSource == kNormFromResidual) {  // x += bias + the partials, in that order (rows is null here: launch_rms_norm)
            const int64_t slice = int64_t(gridDim.x) * n;
            float4 sum[kChunks];
#pragma unroll
            for (int c = 0; c < kChunks; ++c) {
                sum[c] = residual.bias ? load4_or_zero(residual.bias_dtype, residual.bias, 0, first(c), n) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            for (int s = 0; s < residual.n_partial; ++s) {
#pragma unroll
                for (int c = 0; c < kChunks; ++c) {
                    if (first(c) >= n) continue;
                    const float4 part = *reinterpret_cast<const float4 *>(residual.partials + int64_t(s) * slice + int64_t(r) * n + first(c));
                    sum[c].x += part.x, sum[c].y += part.y, sum[c].z += part.z, sum[c].w += part.w;
                }
            }
#pragma unroll
            for (int c = 0; c < kChunks; ++c) {
                if (first(c) >= n) continue;
                v[c].x += sum[c].x, v[c].y += sum[c].y, v[c].z += sum[c].z, v[c].w += sum[c].w;
                *reinterpret_cast<float4 *>(x + int64_t(r) * n + first(c)) = v[c];
            }
        }
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) sum_sq += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
    sum_sq = block_sum(sum_sq);
    const float scale = rsqrtf(sum_sq / float(n) + eps);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        if (first(c) >= n) continue;
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v[c].x * scale * w[c].x, v[c].y * scale * w[c].y);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(v[c].z * scale * w[c].z, v[c].w * scale * w[c].w);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t *>(&lo);
        packed.y = *reinterpret_cast<const uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(out + int64_t(r) * n + first(c)) = packed;
    }
}

// y[r][o] += b[o] over n_row rows of n_out.
__global__ void add_bias_kernel(float *y, int n_out, int64_t n, hp_dtype b_dtype, const void *b) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += load(b_dtype, b, i % n_out);
}

__global__ void token_seq_kernel(const int32_t *seq_token_start, int n_seq, int32_t *token_seq) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_seq) return;
    for (int t = seq_token_start[s]; t < seq_token_start[s + 1]; ++t) token_seq[t] = s;
}

// Chunks of 4 elements a thread of rms_norm_rows_kernel holds for rows of n elements (1, 2, 4 or 8), 0 where that
// kernel cannot take them (n not a multiple of 4, misaligned rows, or more than 32 elements a thread).
inline int norm_row_chunks(int n, int threads, const void *x, const void *out) {
    if (n <= 0 || n % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 8 != 0) return 0;
    const int needed = (n + 4 * threads - 1) / (4 * threads);
    for (int chunks = 1; chunks <= 8; chunks *= 2) {
        if (needed <= chunks) return chunks;
    }
    return 0;
}

template <int kSource>
void launch_rms_norm_rows(int chunks, cudaStream_t stream, float *x, const int32_t *rows, int n_row, int n, __nv_bfloat16 *out,
                          hp_dtype w_dtype, const void *weight, float eps, const NormEmbed &embed, const NormResidual &residual) {
    const dim3 grid{unsigned(n_row)}, block{unsigned(HP_CUDA_NORM_THREADS)};
    switch (chunks) {
        case 1: hp_cuda_gemv::launch_pdl(rms_norm_rows_kernel<1, kSource>, grid, block, 0, stream, x, rows, out, n, w_dtype, weight, eps, embed, residual); break;
        case 2: hp_cuda_gemv::launch_pdl(rms_norm_rows_kernel<2, kSource>, grid, block, 0, stream, x, rows, out, n, w_dtype, weight, eps, embed, residual); break;
        case 4: hp_cuda_gemv::launch_pdl(rms_norm_rows_kernel<4, kSource>, grid, block, 0, stream, x, rows, out, n, w_dtype, weight, eps, embed, residual); break;
        default: hp_cuda_gemv::launch_pdl(rms_norm_rows_kernel<8, kSource>, grid, block, 0, stream, x, rows, out, n, w_dtype, weight, eps, embed, residual); break;
    }
}

// out[r] = bf16(RMSNorm(x[rows ? rows[r] : r]) * weight) over n_row rows of n, by the kernels that knob norm_vec
// (`mode`) picks: 0 rms_norm_bf16_kernel; 1 or 2 rms_norm_rows_kernel where it takes the shape, else
// rms_norm_bf16_kernel. With `embed` (the first layer's norm; rows must be null) x is first filled from the
// embedding table, and token_seq written when embed->seq_token_start is given: with mode 2 in the norm's own
// launch where rms_norm_rows_kernel takes the shape, else by token_seq_kernel and embed_kernel before it.
// With `residual` (knob gemm_split_k) x[r] first gets its partial products and bias added: in the norm's launch
// where rms_norm_rows_kernel takes the shape (mode 1 or 2, partials 16-byte aligned), else by add_partials_kernel.
// Returns false, launching nothing, for what it cannot do: embed or residual with gathered rows, or both at once.
inline bool launch_rms_norm(int mode, cudaStream_t stream, float *x, const int32_t *rows, int n_row, int n, __nv_bfloat16 *out,
                            hp_dtype w_dtype, const void *weight, float eps, const NormEmbed *embed = nullptr,
                            const NormResidual *residual = nullptr) {
    if ((embed || residual) && rows) return false;
    if (embed && residual) return false;
    if (n_row <= 0) return true;
    const int chunks = mode > 0 ? norm_row_chunks(n, HP_CUDA_NORM_THREADS, x, out) : 0;
    if (embed && mode == 2 && chunks > 0 && embed->n_seq <= n_row * HP_CUDA_NORM_THREADS) {
        launch_rms_norm_rows<kNormFromEmbedding>(chunks, stream, x, nullptr, n_row, n, out, w_dtype, weight, eps, *embed, NormResidual{});
        return true;
    }
    if (residual && chunks > 0 && reinterpret_cast<uintptr_t>(residual->partials) % 16 == 0) {
        launch_rms_norm_rows<kNormFromResidual>(chunks, stream, x, nullptr, n_row, n, out, w_dtype, weight, eps, NormEmbed{}, *residual);
        return true;
    }
    if (residual) {
        const int64_t total = int64_t(n) * n_row;
        hp_cuda_gemv::launch_pdl(add_partials_kernel, dim3(unsigned(std::min<int64_t>((total + 255) / 256, 4096))), dim3(256), 0, stream, x, n,
                                 n_row, *residual);
    }
    if (embed) {
        if (embed->seq_token_start && embed->n_seq > 0) {
            token_seq_kernel<<<unsigned((embed->n_seq + 63) / 64), 64, 0, stream>>>(embed->seq_token_start, embed->n_seq, embed->token_seq);
        }
        embed_kernel<<<unsigned(n_row), 256, 0, stream>>>(x, embed->token_ids, embed->dtype, embed->table, n);
    }
    if (chunks > 0) {
        launch_rms_norm_rows<kNormFromX>(chunks, stream, x, rows, n_row, n, out, w_dtype, weight, eps, NormEmbed{}, NormResidual{});
    } else {
        hp_cuda_gemv::launch_pdl(rms_norm_bf16_kernel, dim3(unsigned(n_row)), dim3(HP_CUDA_NORM_THREADS), 0, stream, x, rows, out, n, w_dtype,
                                 weight, eps);
    }
    return true;
}

struct HeadParams {
    int n_head, n_head_kv, d_head;
    float eps;
    hp_dtype bias_dtype;                 // of bq/bk/bv
    const void *bq, *bk, *bv;            // optional
    hp_dtype norm_dtype;
    const void *q_norm, *k_norm;         // optional
    const float *inv_freq;               // [d_head / 2]
    int block_tokens, max_blocks;
    hp_cuda_gemv::L2Prefetch prefetch;   // upcoming weights, prefetched into L2 before the wait (gemv.cuh)
    const float *qkv = nullptr;          // optional (knob gemm_qkv): q, k and v from its rows [q | k | v] of qkv_stride floats
    int qkv_stride = 0;
};

// One block of 32..256 threads per (head, token), heads = n_head q heads then n_head_kv kv heads:
// + bias, per-head RMSNorm (q/k), RoPE (q/k), and for kv heads the K and V rows into the cache.
template <hp_dtype KV>
__global__ void head_kernel(HeadParams p, float *q, const float *k, const float *v, const int32_t *positions, const int32_t *token_seq,
                            const int32_t *block_tables, void *k_cache, void *v_cache) {
    __shared__ float head[kMaxHeadDim];
    __shared__ float v_head[kMaxHeadDim];
    hp_cuda_gemv::launch_dependents();
    if (hp_cuda_gemv::kL2Prefetch) hp_cuda_gemv::prefetch_l2(p.prefetch, hp_cuda_gemv::linear_block(), hp_cuda_gemv::grid_blocks());
    // Thread i holds element i of the head: the launch gives min(256, d_head rounded up to 32) threads
    // and create() refuses d_head > kMaxHeadDim (256).
    const int hh = blockIdx.x, t = blockIdx.y, d = p.d_head, half = d / 2, i = threadIdx.x;
    const bool is_q = hh < p.n_head, mine = i < d;
    const int h = is_q ? hh : hh - p.n_head;
    // Before the wait, what only weights and the step's inputs decide: this element's biases and
    // norm weight, and its rotation at the token's position.
    const void *bias = is_q ? p.bq : p.bk;
    const void *norm = is_q ? p.q_norm : p.k_norm;
    const float bias_i = mine && bias ? load(p.bias_dtype, bias, int64_t(h) * d + i) : 0.0f;
    const float v_bias_i = mine && !is_q && p.bv ? load(p.bias_dtype, p.bv, int64_t(h) * d + i) : 0.0f;
    const float norm_i = mine && norm ? load(p.norm_dtype, norm, i) : 0.0f;
    const int position = positions[t];
    float sin_a = 0.0f, cos_a = 1.0f;
    if (i < half) sincosf(float(position) * p.inv_freq[i], &sin_a, &cos_a);
    hp_cuda_gemv::wait_for_previous_grid();
    const float *q_row = p.qkv ? p.qkv + int64_t(t) * p.qkv_stride : q + int64_t(t) * p.n_head * d;
    const float *k_row = p.qkv ? q_row + int64_t(p.n_head) * d : k + int64_t(t) * p.n_head_kv * d;
    const float *v_row = p.qkv ? k_row + int64_t(p.n_head_kv) * d : v + int64_t(t) * p.n_head_kv * d;
    const float *src = (is_q ? q_row : k_row) + int64_t(h) * d;
    if (mine) {
        head[i] = src[i] + bias_i;  // 0 without a bias, as before
        if (!is_q) v_head[i] = v_row[int64_t(h) * d + i] + v_bias_i;
    }
    __syncthreads();
    if (norm) {
        const float sum_sq = mine ? head[i] * head[i] : 0.0f;
        const float scale = rsqrtf(block_sum(sum_sq) / float(d) + p.eps);
        if (mine) head[i] = head[i] * scale * norm_i;
        __syncthreads();
    }
    float rotated[2] = {0.0f, 0.0f};
    if (i < half) {
        const float first = head[i], second = head[i + half];
        rotated[0] = first * cos_a - second * sin_a;
        rotated[1] = second * cos_a + first * sin_a;
    }
    __syncthreads();
    if (i < half) {
        head[i] = rotated[0];
        head[i + half] = rotated[1];
    }
    __syncthreads();
    if (is_q) {
        if (mine) q[(int64_t(t) * p.n_head + h) * d + i] = head[i];
        return;
    }
    const int32_t *table = block_tables + int64_t(token_seq[t]) * p.max_blocks;
    const int64_t offset = (int64_t(table[position / p.block_tokens]) * p.block_tokens + position % p.block_tokens) * p.n_head_kv * d +
                           int64_t(h) * d;
    if (mine) {
        store_as<KV>(k_cache, offset + i, head[i]);
        store_as<KV>(v_cache, offset + i, v_head[i]);
    }
}

struct AttentionParams {
    int n_head, n_head_kv, d_head, n_split;
    float scale;
    int block_tokens, max_blocks;
};

constexpr int kAttnThreads = HP_CUDA_ATTN_WARPS * 32;  // also the KV positions of one tile
constexpr int kAttnOutPerThread = (kMaxGroup * kMaxHeadDim + kAttnThreads - 1) / kAttnThreads;

// Eight consecutive cache elements (16-byte aligned: d_head % 8 == 0) as float.
template <hp_dtype D>
__device__ inline void load8(const void *data, int64_t i, float out[8]) {
    if constexpr (D == HP_DTYPE_F32) {
        const float4 a = reinterpret_cast<const float4 *>(static_cast<const float *>(data) + i)[0];
        const float4 b = reinterpret_cast<const float4 *>(static_cast<const float *>(data) + i)[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
        const uint4 raw = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(data) + i);
        const uint16_t *half = reinterpret_cast<const uint16_t *>(&raw);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            out[j] = D == HP_DTYPE_BF16 ? __uint_as_float(uint32_t(half[j]) << 16) : __half2float(__ushort_as_half(half[j]));
        }
    }
}

// Split-KV paged decode attention (flash-decoding). Block (kv head g, token t, split s) owns a
// contiguous share of the token's positions [0, position] and every query head of g's GQA group,
// so each K/V row is read once per group. Positions go in tiles of kAttnThreads, one position per
// thread: (A) the thread's q.k for every head of the group (16-byte K loads, q broadcast from
// shared memory); (B) one warp per head: tile max, running max, rescale factor; (C) exponentials;
// (D) running sums, and the [group][d_head] accumulators += p * V: with WIDE_V thread (r, c) holds
// elements c*8..c*8+7 of every head for positions r, r + R, ... (16-byte V loads; R = threads /
// (d_head/8)), the R partial sums added through shared memory at the end (more bytes in flight per
// thread: few tokens); otherwise each thread owns its outputs and reads V one element per position
// (fewer registers: many tokens). HP_CUDA_ATTN_WIDE_V_MAX_TOKENS picks. Writes (max, sum, unnormalised acc) per query head and split to
// `partial`, laid out [token][head][split][d_head + 2]; an empty split writes max = -inf.
template <hp_dtype KV, bool WIDE_V>
__global__ void __launch_bounds__(kAttnThreads) attention_split_kernel(AttentionParams p, const float *q, const int32_t *positions,
                                                                     const int32_t *token_seq, const int32_t *block_tables,
                                                                     const void *k_cache, const void *v_cache, float *partial) {
    extern __shared__ float shared[];
    constexpr int T = kAttnThreads;
    hp_cuda_gemv::launch_dependents();
    hp_cuda_gemv::wait_for_previous_grid();
    const int g = blockIdx.x, t = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
    const int lane = tid % 32, warp = tid / 32, d = p.d_head;
    const int group = p.n_head / p.n_head_kv;
    float *q_s = shared;                   // [group][d], pre-scaled
    float *s_s = q_s + kMaxGroup * d;      // [group][T]: scores, then probabilities
    float *m_s = s_s + kMaxGroup * T;      // [group]: running max
    float *l_s = m_s + kMaxGroup;          // [group]: running sum
    float *alpha_s = l_s + kMaxGroup;      // [group]: rescale of the running values for this tile
    auto *row_s = reinterpret_cast<int64_t *>(alpha_s + kMaxGroup);  // [T] row offset of each position (8d + 8T + 24 floats in: 32-byte aligned)
    for (int i = tid; i < group * d; i += T) q_s[i] = q[(int64_t(t) * p.n_head + g * group) * d + i] * p.scale;
    if (tid < kMaxGroup) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    const int length = positions[t] + 1;
    const int chunk = (length + p.n_split - 1) / p.n_split;
    const int begin = min(length, split * chunk), end = min(length, begin + chunk);
    const int32_t *table = block_tables + int64_t(token_seq[t]) * p.max_blocks;
    const int64_t row_width = int64_t(p.n_head_kv) * d;
    // V accumulation layout: thread (r, c) owns eight consecutive elements c*8.. of every head of
    // the group and takes positions r, r + R, ... of each tile (16-byte V loads, R rows in flight
    // per block); the R partial sums are added at the end.
    // Without WIDE_V (fewer registers, more blocks per SM: better for many tokens) each thread owns
    // outputs tid, tid + T, ... of [group][d] and reads V one element per position.
    const int chunks = d / 8, R = T / chunks;
    const int c = tid % chunks, r = tid / chunks;
    const bool v_lane = r < R;
    constexpr int kVGroup = WIDE_V ? kMaxGroup : 1, kOut = WIDE_V ? 1 : kAttnOutPerThread;
    float vacc[kVGroup][8];
    float acc[kOut];
#pragma unroll
    for (int hh = 0; hh < kVGroup; ++hh) {
#pragma unroll
        for (int e = 0; e < 8; ++e) vacc[hh][e] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) acc[k] = 0.0f;
    __syncthreads();

    for (int tile = begin; tile < end; tile += T) {
        const int n_valid = min(T, end - tile);
        // (A) scores of this thread's position.
        if (tid < n_valid) {
            const int pos = tile + tid;
            const int64_t base = (int64_t(table[pos / p.block_tokens]) * p.block_tokens + pos % p.block_tokens) * row_width + int64_t(g) * d;
            row_s[tid] = base;
            float dot[kMaxGroup];
#pragma unroll
            for (int hh = 0; hh < kMaxGroup; ++hh) dot[hh] = 0.0f;
            for (int i0 = 0; i0 < d; i0 += 8) {
                float k8[8];
                load8<KV>(k_cache, base + i0, k8);
#pragma unroll
                for (int hh = 0; hh < kMaxGroup; ++hh) {
                    if (hh < group) {
#pragma unroll
                        for (int j = 0; j < 8; ++j) dot[hh] += q_s[hh * d + i0 + j] * k8[j];
                    }
                }
            }
#pragma unroll
            for (int hh = 0; hh < kMaxGroup; ++hh) {
                if (hh < group) s_s[hh * T + tid] = dot[hh];
            }
        }
        __syncthreads();
        // (B) per head: tile max -> running max and rescale factor.
        for (int hh = warp; hh < group; hh += HP_CUDA_ATTN_WARPS) {
            float tile_max = -INFINITY;
            for (int j = lane; j < n_valid; j += 32) tile_max = fmaxf(tile_max, s_s[hh * T + j]);
            for (int offset = 16; offset > 0; offset /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
            if (lane == 0) {
                const float m_new = fmaxf(m_s[hh], tile_max);
                alpha_s[hh] = __expf(m_s[hh] - m_new);  // 0 on the first tile (m = -inf)
                m_s[hh] = m_new;
            }
        }
        __syncthreads();
        // (C) probabilities of this thread's position.
        if (tid < n_valid) {
            for (int hh = 0; hh < group; ++hh) s_s[hh * T + tid] = __expf(s_s[hh * T + tid] - m_s[hh]);
        }
        __syncthreads();
        // (D) running sums (one warp per head) and accumulators (each thread its outputs).
        for (int hh = warp; hh < group; hh += HP_CUDA_ATTN_WARPS) {
            float sum = 0.0f;
            for (int j = lane; j < n_valid; j += 32) sum += s_s[hh * T + j];
            sum = warp_sum(sum);
            if (lane == 0) l_s[hh] = l_s[hh] * alpha_s[hh] + sum;
        }
        if constexpr (!WIDE_V) {
#pragma unroll
            for (int k = 0; k < kOut; ++k) {
                const int o = tid + k * T;
                if (o >= group * d) break;
                const int hh = o / d, i = o % d;
                float value = acc[k] * alpha_s[hh];
                for (int j = 0; j < n_valid; ++j) value += s_s[hh * T + j] * load_as<KV>(v_cache, row_s[j] + i);
                acc[k] = value;
            }
        } else {
#pragma unroll
        for (int hh = 0; hh < kVGroup; ++hh) {
            if (hh < group) {
                const float alpha = alpha_s[hh];
#pragma unroll
                for (int e = 0; e < 8; ++e) vacc[hh][e] *= alpha;
            }
        }
        if (v_lane) {
            for (int j = r; j < n_valid; j += R) {
                float v8[8];
                load8<KV>(v_cache, row_s[j] + c * 8, v8);
#pragma unroll
                for (int hh = 0; hh < kVGroup; ++hh) {
                    if (hh < group) {
                        const float prob = s_s[hh * T + j];
#pragma unroll
                        for (int e = 0; e < 8; ++e) vacc[hh][e] += prob * v8[e];
                    }
                }
            }
        }
        }
        __syncthreads();
    }
    for (int index = tid; index < group * 2; index += T) {
        const int hh = index / 2;
        partial[((int64_t(t) * p.n_head + g * group + hh) * p.n_split + split) * (d + 2) + index % 2] = index % 2 ? l_s[hh] : m_s[hh];
    }
    if constexpr (!WIDE_V) {
#pragma unroll
        for (int k = 0; k < kOut; ++k) {
            const int o = tid + k * T;
            if (o >= group * d) break;
            const int hh = o / d, i = o % d;
            partial[((int64_t(t) * p.n_head + g * group + hh) * p.n_split + split) * (d + 2) + 2 + i] = acc[k];
        }
        return;
    }
    // The R row lanes' sums, one head at a time through s_s (R * d <= kMaxGroup * T floats).
#pragma unroll
    for (int hh = 0; hh < kVGroup; ++hh) {
        if (hh < group) {
            __syncthreads();
            if (v_lane) {
#pragma unroll
                for (int e = 0; e < 8; ++e) s_s[r * d + c * 8 + e] = vacc[hh][e];
            }
            __syncthreads();
            for (int i = tid; i < d; i += T) {
                float sum = 0.0f;
                for (int rr = 0; rr < R; ++rr) sum += s_s[rr * d + i];
                partial[((int64_t(t) * p.n_head + g * group + hh) * p.n_split + split) * (d + 2) + 2 + i] = sum;
            }
        }
    }
}

inline size_t attention_shared_bytes(int d_head) {
    return sizeof(float) * (size_t(kMaxGroup) * d_head + size_t(kMaxGroup) * kAttnThreads + 3 * kMaxGroup + 2) +
           sizeof(int64_t) * kAttnThreads;
}

// Reduces the splits of every (head, token) into the bf16 attention output [token][head][d_head]:
// the split weights exp(m_s - max) / total are computed once into shared memory.
__global__ void attention_reduce_kernel(const float *partial, int n_head, int n_split, int d, __nv_bfloat16 *out) {
    __shared__ float weight_s[HP_CUDA_ATTN_MAX_SPLIT];
    hp_cuda_gemv::launch_dependents();  // the o_proj GEMV after it may start streaming its weights
    hp_cuda_gemv::wait_for_previous_grid();
    const int h = blockIdx.x, t = blockIdx.y;
    const float *base = partial + (int64_t(t) * n_head + h) * n_split * (d + 2);
    if (threadIdx.x == 0) {
        float m_max = -INFINITY;
        for (int s = 0; s < n_split; ++s) m_max = fmaxf(m_max, base[s * (d + 2)]);
        float total = 0.0f;
        for (int s = 0; s < n_split; ++s) {
            const float ms = base[s * (d + 2)];
            weight_s[s] = ms == -INFINITY ? 0.0f : __expf(ms - m_max);
            total += weight_s[s] * base[s * (d + 2) + 1];
        }
        for (int s = 0; s < n_split; ++s) weight_s[s] /= total;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float value = 0.0f;
        for (int s = 0; s < n_split; ++s) value += weight_s[s] * base[s * (d + 2) + 2 + i];
        out[(int64_t(t) * n_head + h) * d + i] = __float2bfloat16_rn(value);
    }
}

// act = bf16(silu(gate) * up), elementwise over n.
__global__ void silu_mul_bf16_kernel(const float *gate, const float *up, __nv_bfloat16 *act, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) act[i] = __float2bfloat16_rn(gate[i] / (1.0f + __expf(-gate[i])) * up[i]);
}

// Router softmax, top-k (ties to the lower index), optional renormalisation. One thread per token.
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
        p[best] = -1.0f;
        if (expert_counts) atomicAdd(expert_counts + best, 1);
    }
    if (norm_topk_prob) {
        for (int j = 0; j < k; ++j) expert_weight[t * k + j] /= chosen_total;
    }
}

// Dot of a bf16 weight row with a bf16 activation row of n (16-byte loads when n % 8 == 0).
__device__ inline float row_dot_bf16(const __nv_bfloat16 *w, const __nv_bfloat16 *x, int n, int lane) {
    float sum = 0.0f;
    if (n % 8 == 0) {
        const uint4 *w4 = reinterpret_cast<const uint4 *>(w);
        const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
        for (int i = lane; i < n / 8; i += 32) {
            const uint4 wv = w4[i], xv = x4[i];
            const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wv);
            const __nv_bfloat162 *xp = reinterpret_cast<const __nv_bfloat162 *>(&xv);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 wf = __bfloat1622float2(wp[j]), xf = __bfloat1622float2(xp[j]);
                sum += wf.x * xf.x + wf.y * xf.y;
            }
        }
    } else {
        for (int i = lane; i < n; i += 32) sum += __bfloat162float(w[i]) * __bfloat162float(x[i]);
    }
    return warp_sum(sum);
}

// Routed experts, gate and up: act[t*k+slot][row] = bf16(silu(Wg x) * (Wu x)) for expert
// expert_index[t*k+slot]. Grid (ceil(width / rows), n_token * k); one warp per row.
__global__ void expert_gate_up_kernel(const __nv_bfloat16 *const *gate_table, const __nv_bfloat16 *const *up_table,
                                      const int32_t *expert_index, int k, const __nv_bfloat16 *x, int d_model, int width,
                                      __nv_bfloat16 *act) {
    const int row = blockIdx.x * HP_CUDA_MOE_ROWS_PER_BLOCK + threadIdx.x / 32, pair = blockIdx.y, lane = threadIdx.x % 32;
    if (row >= width) return;
    const int e = expert_index[pair];
    const __nv_bfloat16 *in = x + int64_t(pair / k) * d_model;
    const float gate = row_dot_bf16(gate_table[e] + int64_t(row) * d_model, in, d_model, lane);
    const float up = row_dot_bf16(up_table[e] + int64_t(row) * d_model, in, d_model, lane);
    if (lane == 0) act[int64_t(pair) * width + row] = __float2bfloat16_rn(gate / (1.0f + __expf(-gate)) * up);
}

// Routed experts, down: out[t*k+slot][row] = Wd act[t*k+slot]. Grid (ceil(d_model / rows), n_token * k).
__global__ void expert_down_kernel(const __nv_bfloat16 *const *down_table, const int32_t *expert_index, const __nv_bfloat16 *act,
                                   int width, int d_model, float *out) {
    const int row = blockIdx.x * HP_CUDA_MOE_ROWS_PER_BLOCK + threadIdx.x / 32, pair = blockIdx.y, lane = threadIdx.x % 32;
    if (row >= d_model) return;
    const float value = row_dot_bf16(down_table[expert_index[pair]] + int64_t(row) * width, act + int64_t(pair) * width, width, lane);
    if (lane == 0) out[int64_t(pair) * d_model + row] = value;
}

// x[t] += sum_slot weight[t*k+slot] * out[t*k+slot] (+ sigmoid(shared_logit[t]) * shared[t]),
// in slot order, so the result does not depend on scheduling.
__global__ void moe_combine_kernel(float *x, const float *out, const float *expert_weight, int k, const float *shared,
                                   const float *shared_logit, int d_model) {
    const int t = blockIdx.x;
    const float shared_weight = shared ? 1.0f / (1.0f + __expf(-shared_logit[t])) : 0.0f;
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) {
        float sum = 0.0f;
        for (int slot = 0; slot < k; ++slot) sum += expert_weight[t * k + slot] * out[(int64_t(t) * k + slot) * d_model + i];
        if (shared) sum += shared_weight * shared[int64_t(t) * d_model + i];
        x[int64_t(t) * d_model + i] += sum;
    }
}

}  // namespace hp_cuda_baseline
