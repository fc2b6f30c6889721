// Decode GEMV / skinny GEMM of the CUDA baseline: y[t][o] = sum_i W[o][i] x[t][i] for a few tokens
// (n_token 1..64), bf16 weights [n_out][n_in] and bf16 activations [n_token][n_in], float32
// accumulation. Decode is memory-bound, so the kernel exists to stream W at full bandwidth: every
// lane loads 16 bytes per load and has 2 * HP_CUDA_GEMV_UNROLL such loads per matrix in flight
// before their first use, and the loaded registers feed the tensor cores directly (mma.sync
// m16n8k16, see gemv_kernel), so that 8..64 tokens cost no more arithmetic issue than one.
//
// A tile of 16 rows goes to a cluster of blocks of HP_CUDA_GEMV_WARPS warps (cluster size chosen per
// matrix: enough warps in flight even for a 2048-row matrix); the warps split its inputs and their
// partial sums are added in a fixed order, in shared memory and then across the cluster's
// distributed shared memory (deterministic: no atomics, the same order every run). Up to three matrices with the same input go in one launch (q, k, v), each with
// its own output. Epilogues: store (+ bias), accumulate into the residual (+ bias; one writer per
// element), or the SwiGLU product bf16(silu(Wg x + bg) * (Wu x + bu)) of a gate/up pair.
// With HP_CUDA_PDL the launch is a programmatic dependent launch (launch_pdl): the kernel issues
// its first weight loads (weights are never written during a step) and only then waits for the
// previous kernel (griddepcontrol.wait) before it reads activations, so launch latency and the
// previous kernel's tail overlap the weight stream. In a captured graph this is a programmatic edge.
// Any n_in works: rows whose length is not a multiple of 8 (or unaligned operands) take a path with
// element loads. Launch shapes depend on n_token and the matrix shapes only (graph-capturable).
//
// RMSNorm on the input side (Params::x_f32, knob gemv_norm): the activations are then the float32
// residual rows (row x_rows[t] for token t when given) and y = (W (x * norm_w)) / rms(x), with
// rms(x) = sqrt(mean(x^2) + eps): each lane builds its bf16 operand as bf16(x * norm_w) and sums
// x^2 over the same chunks, those sums go through the same fixed-order warp/cluster reduction as
// the products (every input chunk of a token is loaded by exactly one lane), and the epilogue
// scales by 1/rms before the bias. So no separate norm kernel and no bf16 copy of the normed rows;
// the rounding differs from norm-then-GEMV only in where the bf16 rounding happens.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include <hotpass/forward_abi.h>

#include "knobs.h"

namespace hp_cuda_gemv {

enum Epilogue { kStore = 0, kAccumulate = 1, kSiluMul = 2 };

constexpr int kWarps = HP_CUDA_GEMV_WARPS;    // warps of a block, splitting the inputs of one tile
constexpr int kUnroll = HP_CUDA_GEMV_UNROLL;  // steps of 32 inputs per warp iteration: 2 * unroll 16-byte loads in flight per lane and matrix
constexpr int kTileRows = 16;                 // output rows per block (the m16n8k16 product's M)
constexpr int kMaxTokens = 64;                // tokens per pass (8 tiles of 8)
constexpr int kMaxSegments = 3;

struct Segment {
    const __nv_bfloat16 *w = nullptr;   // bf16 [n_out][n_in]
    const __nv_bfloat16 *w2 = nullptr;  // kSiluMul: the up matrix, same shape
    const void *bias = nullptr;         // optional [n_out] (of w), bias_dtype
    const void *bias2 = nullptr;        // optional [n_out] (of w2), bias2_dtype
    hp_dtype bias_dtype = HP_DTYPE_F32, bias2_dtype = HP_DTYPE_F32;
    int n_out = 0;
    int first_block = 0;                // blocks of the segments before this one
    void *y = nullptr;                  // f32 [n_token][n_out]; kSiluMul: bf16 [n_token][n_out]
};

struct Params {
    const __nv_bfloat16 *x = nullptr;   // bf16 [n_token][n_in] (unless x_f32)
    const float *x_f32 = nullptr;       // with RMSNorm: f32 [*][n_in] residual rows (n_in % 8 == 0, 16-byte aligned)
    const int32_t *x_rows = nullptr;    // optional with x_f32: token t reads row x_rows[t] (device)
    const void *norm_w = nullptr;       // with x_f32: [n_in] RMSNorm weight, norm_dtype, 16-byte aligned
    hp_dtype norm_dtype = HP_DTYPE_F32;
    float norm_eps = 0.0f;
    int n_in = 0, n_token = 0, n_segment = 0;
    Segment segment[kMaxSegments];
};

__device__ inline float load_bias(hp_dtype dtype, const void *bias, int i) {
    if (!bias) return 0.0f;
    switch (dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(bias)[i];
        case HP_DTYPE_F16: return __half2float(static_cast<const __half *>(bias)[i]);
        case HP_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(bias)[i]);
    }
    return 0.0f;
}

// Weights are read once per step: skip L1 (the activations live there).
__device__ inline uint4 load_stream(const void *ptr) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
    return v;
}

// Elements [8c, 8c + 8) of a bf16 row of n as one uint4: one 16-byte load, or element loads with
// zeros past n (rows of any length and alignment).
template <bool VEC, bool STREAM>
__device__ inline uint4 load_chunk(const __nv_bfloat16 *row, int c, int n) {
    if constexpr (VEC) {
        return STREAM ? load_stream(row + int64_t(c) * 8) : __ldg(reinterpret_cast<const uint4 *>(row) + c);
    } else {
        uint32_t word[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = c * 8 + 2 * j;
            const uint32_t lo = i < n ? __bfloat16_as_ushort(row[i]) : 0u;
            const uint32_t hi = i + 1 < n ? __bfloat16_as_ushort(row[i + 1]) : 0u;
            word[j] = lo | (hi << 16);
        }
        return make_uint4(word[0], word[1], word[2], word[3]);
    }
}

// Eight consecutive RMSNorm weights [8c, 8c + 8) as float (16-byte aligned rows).
__device__ inline void load_norm8(hp_dtype dtype, const void *w, int c, float out[8]) {
    if (dtype == HP_DTYPE_F32) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(w) + 2 * c), b = __ldg(reinterpret_cast<const float4 *>(w) + 2 * c + 1);
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
        return;
    }
    const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(w) + c);
    const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (dtype == HP_DTYPE_BF16) {
            out[2 * j] = __uint_as_float(word[j] << 16);
            out[2 * j + 1] = __uint_as_float(word[j] & 0xffff0000u);
        } else {
            const float2 pair = __half22float2(*reinterpret_cast<const __half2 *>(&word[j]));
            out[2 * j] = pair.x;
            out[2 * j + 1] = pair.y;
        }
    }
}

// The B operand of the normed path: bf16(x[8c + j] * norm_w[8c + j]) for j < 8, and sum_sq += x^2.
__device__ inline uint4 load_normed_chunk(const float *row, const float norm8[8], int c, float &sum_sq) {
    const float4 a = reinterpret_cast<const float4 *>(row)[2 * c], b = reinterpret_cast<const float4 *>(row)[2 * c + 1];
    sum_sq += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    auto pack = [](float lo, float hi) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&pair);
    };
    return make_uint4(pack(a.x * norm8[0], a.y * norm8[1]), pack(a.z * norm8[2], a.w * norm8[3]), pack(b.x * norm8[4], b.y * norm8[5]),
                      pack(b.z * norm8[6], b.w * norm8[7]));
}

// Programmatic dependent launch (sm_90+; no-ops elsewhere and when not launched as dependent).
__device__ inline void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Launches `kernel` as a programmatic dependent of the stream's previous kernel (HP_CUDA_PDL), else
// plainly. The kernel must call wait_for_previous_grid() before it touches what earlier kernels
// write or read, on every path (so its completion implies theirs).
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args &&...args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = HP_CUDA_PDL ? 1 : 0;
    cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// One warp-level tensor-core product: c[16 rows][8 tokens] += a[16][16] b[16][8], bf16 in, f32 out.
__device__ inline void mma_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Grid (cluster, 16-row tiles of all segments, ceil(n_token / (8 NB))), launched as clusters of
// gridDim.x blocks: the cluster's blocks and their kWarps warps split the inputs of one tile, each
// warp in steps of 32. Lane (g = lane / 4, q = lane % 4) loads the 16 bytes at inputs
// [32 s + 8 q, + 8) of rows g and g + 8 (and of token g's activations): that is exactly its A and
// B fragments of two m16n8k16 products if the 16 inputs of a product are taken in the order the
// lanes hold them (a sum does not care), so the weights go from one 16-byte load straight into the
// tensor cores. NB tiles of 8 tokens share every weight load. Partial sums: warps in a block through
// shared memory, blocks of the cluster through distributed shared memory, both in a fixed order.
// NORM: the input is RMSNorm(x_f32) (see the top of the file; VEC only).
template <int NB, int EPI, bool VEC, bool NORM>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Params p) {
    constexpr int M = EPI == kSiluMul ? 2 : 1;
    constexpr int NT = NB * 8, kStride = kTileRows + 1;  // reduce_s row stride, padded against bank conflicts
    static_assert(VEC || !NORM, "the normed input path loads 16-byte chunks");
    __shared__ float reduce_s[kWarps][NT * kStride];
    __shared__ float block_sum_s[M][kTileRows * NT];     // this block's partial, read by the cluster's first block
    __shared__ float sum_sq_s[NORM ? kWarps : 1][NT];    // NORM: each warp's sum of x^2 per token
    __shared__ float block_sum_sq_s[NT];                 // NORM: this block's, read by the cluster's first block
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int n_split = gridDim.x * kWarps, split = blockIdx.x * kWarps + warp;  // the warp's share of the inputs
    Segment seg = p.segment[0];
    if (p.n_segment > 1 && int(blockIdx.y) >= p.segment[1].first_block) seg = p.segment[1];
    if (p.n_segment > 2 && int(blockIdx.y) >= p.segment[2].first_block) seg = p.segment[2];
    const int t0 = blockIdx.z * NT, n_t = min(NT, p.n_token - t0);
    const int row0 = (int(blockIdx.y) - seg.first_block) * kTileRows;
    const int n_in = p.n_in, n_chunk = (n_in + 7) / 8, n_step = (n_chunk + 3) / 4;

    const __nv_bfloat16 *w_row[M][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t row = min(row0 + g + 8 * h, seg.n_out - 1);  // rows past n_out load a valid row, store nothing
        w_row[0][h] = seg.w + row * n_in;
        if constexpr (M == 2) w_row[M - 1][h] = seg.w2 + row * n_in;
    }
    const __nv_bfloat16 *x_row[NB];
    const float *xf_row[NB];
    float sum_sq[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        x_row[nb] = nb * 8 + g < n_t ? p.x + int64_t(t0 + nb * 8 + g) * n_in : nullptr;
        xf_row[nb] = nullptr;
        sum_sq[nb] = 0.0f;
    }

    float acc[M][NB][4];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][nb][i] = 0.0f;

    launch_dependents();
    bool waited = false;
    for (int s0 = split * kUnroll; s0 < n_step; s0 += n_split * kUnroll) {
        uint4 a[M][2][kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = min((s0 + u) * 4 + q, n_chunk - 1);  // clamped; its activations are zero
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) a[m][h][u] = load_chunk<VEC, true>(w_row[m][h], c, n_in);
        }
        if (!waited) {  // the activations (and a residual) are the previous kernel's output
            wait_for_previous_grid();
            waited = true;
            if constexpr (NORM) {  // x_rows is a batch array, but read it here on one path for all
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    const int t = t0 + nb * 8 + g;
                    if (nb * 8 + g < n_t) xf_row[nb] = p.x_f32 + int64_t(p.x_rows ? p.x_rows[t] : t) * n_in;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (s0 + u >= n_step) break;
            const int c = (s0 + u) * 4 + q;
            float norm8[8];
            if constexpr (NORM) {
                if (c < n_chunk) load_norm8(p.norm_dtype, p.norm_w, c, norm8);
            }
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                uint4 b = make_uint4(0, 0, 0, 0);
                if constexpr (NORM) {
                    if (xf_row[nb] && c < n_chunk) b = load_normed_chunk(xf_row[nb], norm8, c, sum_sq[nb]);
                } else {
                    if (x_row[nb] && c < n_chunk) b = load_chunk<VEC, false>(x_row[nb], c, n_in);
                }
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    mma_16816(acc[m][nb], a[m][0][u].x, a[m][1][u].x, a[m][0][u].y, a[m][1][u].y, b.x, b.y);
                    mma_16816(acc[m][nb], a[m][0][u].z, a[m][1][u].z, a[m][0][u].w, a[m][1][u].w, b.z, b.w);
                }
            }
        }
    }
    if (!waited) wait_for_previous_grid();

    // Sum the warps' partials in warp order, then the blocks' in cluster rank order; element
    // e = token * 16 + row (rows fastest: the stores of 16 consecutive rows coalesce).
    constexpr int kPerThread = (kTileRows * NT + kWarps * 32 - 1) / (kWarps * 32);
    if constexpr (NORM) {  // x^2 of token nb * 8 + g: the 4 lanes q of g, then the warps in order
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
            float total = sum_sq[nb];
            total += __shfl_xor_sync(0xffffffffu, total, 1);
            total += __shfl_xor_sync(0xffffffffu, total, 2);
            if (q == 0) sum_sq_s[warp][nb * 8 + g] = total;
        }
        __syncthreads();
        for (int t = threadIdx.x; t < NT; t += kWarps * 32) {
            float total = 0.0f;
            for (int w = 0; w < kWarps; ++w) total += sum_sq_s[w][t];
            block_sum_sq_s[t] = total;
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
            float *out = reduce_s[warp] + (nb * 8 + 2 * q) * kStride + g;
            out[0] = acc[m][nb][0];
            out[kStride] = acc[m][nb][1];
            out[8] = acc[m][nb][2];
            out[kStride + 8] = acc[m][nb][3];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = threadIdx.x + i * kWarps * 32;
            if (e >= kTileRows * NT) break;
            float total = 0.0f;
            for (int w = 0; w < kWarps; ++w) total += reduce_s[w][(e / kTileRows) * kStride + e % kTileRows];
            block_sum_s[m][e] = total;
        }
        __syncthreads();
    }
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's partial is in its shared memory
    if (blockIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = threadIdx.x + i * kWarps * 32, t = e / kTileRows, row = row0 + e % kTileRows;
            if (e >= kTileRows * NT || t >= n_t || row >= seg.n_out) continue;
            float sum[M];
#pragma unroll
            for (int m = 0; m < M; ++m) {
                sum[m] = block_sum_s[m][e];
                for (unsigned rank = 1; rank < gridDim.x; ++rank) sum[m] += cluster.map_shared_rank(&block_sum_s[m][0], rank)[e];
            }
            if constexpr (NORM) {
                float total = block_sum_sq_s[t];
                for (unsigned rank = 1; rank < gridDim.x; ++rank) total += cluster.map_shared_rank(&block_sum_sq_s[0], rank)[t];
                const float inv_rms = rsqrtf(total / float(n_in) + p.norm_eps);
#pragma unroll
                for (int m = 0; m < M; ++m) sum[m] *= inv_rms;
            }
            const int64_t at = int64_t(t0 + t) * seg.n_out + row;
            const float value = sum[0] + load_bias(seg.bias_dtype, seg.bias, row);
            if constexpr (EPI == kStore) {
                static_cast<float *>(seg.y)[at] = value;
            } else if constexpr (EPI == kAccumulate) {
                static_cast<float *>(seg.y)[at] += value;
            } else {
                const float up = sum[M - 1] + load_bias(seg.bias2_dtype, seg.bias2, row);
                static_cast<__nv_bfloat16 *>(seg.y)[at] = __float2bfloat16_rn(value / (1.0f + __expf(-value)) * up);
            }
        }
    }
    cluster.sync();  // keep every block's shared memory alive until the first block has read it
}

inline bool aligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Blocks per cluster for a step: the fewest (a power of two up to HP_CUDA_GEMV_MAX_CLUSTER) that
// give at least HP_CUDA_GEMV_TARGET_WARPS warps over all tiles, but no more than leaves every warp
// one full iteration of the input loop (small matrices are latency-bound: spread them out).
inline int cluster_size(int tiles, int n_in) {
    const int n_step = ((n_in + 7) / 8 + 3) / 4;
    int size = 1;
    while (size < HP_CUDA_GEMV_MAX_CLUSTER && int64_t(tiles) * size * kWarps < HP_CUDA_GEMV_TARGET_WARPS &&
           2 * size * kWarps * kUnroll <= n_step) {
        size *= 2;
    }
    return size;
}

template <int NB, int EPI>
void launch_tokens(const Params &p, dim3 grid, bool vec, cudaStream_t stream) {
    void (*kernel)(Params) = p.x_f32 ? gemv_kernel<NB, EPI, true, true> : vec ? gemv_kernel<NB, EPI, true, false> : gemv_kernel<NB, EPI, false, false>;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(kWarps * 32);
    config.stream = stream;
    cudaLaunchAttribute attribute[2];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = grid.x;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[1].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = HP_CUDA_PDL ? 2 : 1;
    cudaLaunchKernelEx(&config, kernel, p);
}

// Whether the RMSNorm can go into the GEMV's input (16-byte loads of the f32 rows and weights).
inline bool norm_fusable(int n_in, const float *x_f32, const void *norm_w) {
    return n_in % 8 == 0 && aligned16(x_f32) && aligned16(norm_w);
}

// Fills the segments' first_block, picks the token tiles per pass, the cluster size and the load
// path, and launches on `stream`. EPI is the same for every segment. With x_f32 the caller has
// checked norm_fusable() and every matrix must be 16-byte aligned.
template <int EPI>
void launch(Params p, cudaStream_t stream) {
    if (p.n_token <= 0 || p.n_segment <= 0) return;
    int tiles = 0;
    bool vec = p.n_in % 8 == 0 && (p.x_f32 ? norm_fusable(p.n_in, p.x_f32, p.norm_w) : aligned16(p.x));
    for (int s = 0; s < p.n_segment; ++s) {
        p.segment[s].first_block = tiles;
        tiles += (p.segment[s].n_out + kTileRows - 1) / kTileRows;
        vec = vec && aligned16(p.segment[s].w) && (EPI != kSiluMul || aligned16(p.segment[s].w2));
    }
    const int nb = p.n_token <= 8 ? 1 : p.n_token <= 16 ? 2 : p.n_token <= 32 ? 4 : 8;
    const dim3 grid(unsigned(cluster_size(tiles, p.n_in)), unsigned(tiles), unsigned((p.n_token + 8 * nb - 1) / (8 * nb)));
    switch (nb) {
        case 1: launch_tokens<1, EPI>(p, grid, vec, stream); break;
        case 2: launch_tokens<2, EPI>(p, grid, vec, stream); break;
        case 4: launch_tokens<4, EPI>(p, grid, vec, stream); break;
        default: launch_tokens<8, EPI>(p, grid, vec, stream); break;
    }
}

}  // namespace hp_cuda_gemv
