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
// Steps of at least HP_CUDA_GEMV_PIPELINE_MIN_TOKENS tokens run a pipelined variant: a warp issues
// its next iteration's weight loads before this iteration's products (two register sets, of
// HP_CUDA_GEMV_PIPELINE_UNROLL steps each), so a warp with several iterations keeps its loads in
// flight without a gap at each iteration; otherwise a warp loads, waits, multiplies, loads.
//
// RMSNorm folded into the GEMVs on both sides of the residual (knob gemv_norm), so a dense decode
// step needs no norm kernel after its first: the accumulate epilogue (o_proj, down_proj), which
// writes the new residual x, also writes the next projection's operand h = bf16(x * norm_w) and,
// per 16-row tile, the sum of x^2 over the tile's rows (Params::norm_out); the next GEMV reads h as
// its input and scales its result by 1/rms(x) = (sum of those partial sums / n_in + eps)^-1/2
// before the bias (Params::x_sum_sq), summing the partials in a fixed order. Same math as
// norm-then-project, except that the bf16 rounding comes before the 1/rms scale.
//
// L2 prefetch (knobs l2_prefetch_mb, l2_prefetch_idle_mb, l2_prefetch_bulk, gemv_l2_ahead, gemv_evict_first): a
// batch-1 step is a chain of launches of which most leave DRAM idle part of the time (small
// matrices, attention, the head kernel), so each launch can carry an L2Prefetch, ranges of weights
// that later launches read, issued as L2 prefetches (prefetch.global.L2 per line, or bulk
// cp.async.bulk.prefetch.L2; no registers) before griddepcontrol.wait; forward.cu plans the ranges as a window running ahead
// of the weights in use. Inside a GEMV, each warp prefetches into L2 the weight slices of its
// iteration gemv_l2_ahead ahead, so the loads of the next iteration are in flight while this one's
// products run. With gemv_evict_first the streamed weight loads are marked L2 evict-first, so that
// they push out each other rather than the prefetched lines still waiting for their reader.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
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
// Steps of at least this many tokens (0: none) run the pipelined kernel: iteration i + 1's weight
// loads before iteration i's products, HP_CUDA_GEMV_PIPELINE_UNROLL steps of 32 inputs per iteration.
constexpr int kPipelineMinTokens = HP_CUDA_GEMV_PIPELINE_MIN_TOKENS;
__host__ __device__ constexpr int unroll_of(bool pipeline) { return pipeline ? HP_CUDA_GEMV_PIPELINE_UNROLL : kUnroll; }
constexpr int kL2Ahead = HP_CUDA_GEMV_L2_AHEAD;  // iterations ahead of the loads that a warp prefetches into L2 (0: none)

// Byte ranges of weights (read-only for the whole step) to pull into L2; empty ranges are skipped.
struct L2Prefetch {
    static constexpr int kMaxRanges = 8;
    const void *ptr[kMaxRanges] = {};
    uint32_t bytes[kMaxRanges] = {};
};

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

// kAccumulate's optional second output: the next RMSNorm's input, as described at the top.
struct NormOut {
    __nv_bfloat16 *h = nullptr;   // bf16 [n_token][n_out]: bf16(y * w)
    const void *w = nullptr;      // [n_out] RMSNorm weight, w_dtype
    hp_dtype w_dtype = HP_DTYPE_F32;
    float *sum_sq = nullptr;      // f32 [n_token][ceil(n_out / 16)]: sum of y^2 over each 16-row tile
};

// kStore's attention-head epilogue for the q/k/v launch (knob skinny_head; the skinny GEMM only,
// see skinny_head_fits): segments 0, 1, 2 are q, k and v of heads of d_head rows; after the bias,
// q and k get the per-head RMSNorm (q_norm, k_norm, optional) and RoPE at positions[t], q is
// stored in place (f32, segment 0's y) and k and v go into the paged cache at positions[t] instead
// of segments 1 and 2's y: the head kernel's work (kernels.cuh), without its launch.
struct HeadOut {
    int d_head = 0;                     // 0: a plain store
    int n_head_kv = 0;
    float eps = 0.0f;
    const float *inv_freq = nullptr;    // [d_head / 2]
    hp_dtype norm_dtype = HP_DTYPE_F32;
    const void *q_norm = nullptr, *k_norm = nullptr;  // optional [d_head]
    const int32_t *positions = nullptr;               // [n_token]
    const int32_t *token_seq = nullptr;               // [n_token]: the token's sequence
    const int32_t *block_tables = nullptr;            // [n_seq][max_blocks]
    int block_tokens = 0, max_blocks = 0;
    hp_dtype kv_dtype = HP_DTYPE_BF16;
    void *k_cache = nullptr, *v_cache = nullptr;      // [block][block_tokens][n_head_kv][d_head]
};

struct Params {
    const __nv_bfloat16 *x = nullptr;   // bf16 [n_token][n_in] (rows x_rows[t] when given)
    const int32_t *x_rows = nullptr;    // optional (device, a batch array): token t reads input row x_rows[t]
    const float *x_sum_sq = nullptr;    // optional: f32 [*][n_sum_sq] partial sums of x^2 per input row; then
    int n_sum_sq = 0;                   //   y = (W x) / sqrt(sum / n_in + norm_eps) (+ bias)
    float norm_eps = 0.0f;
    NormOut norm_out;                   // kAccumulate, single segment only
    HeadOut head;                       // kStore, q/k/v segments, skinny GEMM only (skinny_head_fits)
    L2Prefetch prefetch;                // issued by the whole grid before it waits for the previous kernel
    bool skinny = true;                 // launch() may take the skinny GEMM (gemm_skinny.cuh)
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

// Weights are read once per step: skip L1 (the activations live there); with HP_CUDA_GEMV_EVICT_FIRST
// also mark them first to go from L2 (they are not read again in this step).
__device__ inline uint4 load_stream(const void *ptr) {
    uint4 v;
#if HP_CUDA_GEMV_EVICT_FIRST && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr), "l"(policy));
#else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
#endif
    return v;
}

// Pulls [ptr, ptr + bytes) into L2 without waiting (bytes a multiple of 16, ptr 16-byte aligned):
// HP_CUDA_L2_PREFETCH_BULK one cp.async.bulk.prefetch.L2 (the copy engine), else one
// prefetch.global.L2 per 128-byte line from this thread.
__device__ inline void prefetch_l2_range(const void *ptr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (HP_CUDA_L2_PREFETCH_BULK) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(bytes) : "memory");
    } else {
        for (uint32_t at = 0; at < bytes; at += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char *>(ptr) + at));
    }
#endif
}

// This thread's share of `prefetch`, split into kL2Chunk-byte pieces over the n_part parts (blocks)
// of blockDim.x threads; `part` is the calling block's index among them. Ranges are trimmed to
// 16-byte boundaries.
constexpr uint32_t kL2Chunk = HP_CUDA_L2_PREFETCH_BULK ? 16384 : 128;
constexpr bool kL2Prefetch = HP_CUDA_L2_PREFETCH_MB > 0 || HP_CUDA_L2_PREFETCH_IDLE_MB > 0;
__device__ inline void prefetch_l2(const L2Prefetch &prefetch, unsigned part, unsigned n_part) {
    const unsigned thread = part * blockDim.x + threadIdx.x, n_thread = n_part * blockDim.x;
#pragma unroll
    for (int r = 0; r < L2Prefetch::kMaxRanges; ++r) {
        const uintptr_t begin = (reinterpret_cast<uintptr_t>(prefetch.ptr[r]) + 15) & ~uintptr_t(15);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(prefetch.ptr[r]) + prefetch.bytes[r]) & ~uintptr_t(15);
        if (!prefetch.ptr[r] || end <= begin) continue;
        const uint32_t bytes = uint32_t(end - begin), n_chunk = (bytes + kL2Chunk - 1) / kL2Chunk;
        for (uint32_t c = thread; c < n_chunk; c += n_thread) {
            prefetch_l2_range(reinterpret_cast<const void *>(begin + uintptr_t(c) * kL2Chunk), min(kL2Chunk, bytes - c * kL2Chunk));
        }
    }
}
__device__ inline unsigned linear_block() { return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x; }
__device__ inline unsigned grid_blocks() { return gridDim.x * gridDim.y * gridDim.z; }

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
// plainly; cluster_x > 0: in thread-block clusters of cluster_x blocks along x; launch_ex also
// cooperatively (every block resident, for grid-wide barriers) and returns the launch's error. The kernel must call
// wait_for_previous_grid() before it touches what earlier kernels write or read, on every path (so
// its completion implies theirs).
template <typename... Params, typename... Args>
cudaError_t launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, unsigned cluster_x, bool cooperative,
                      cudaStream_t stream, Args &&...args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute[3];
    unsigned n_attribute = 0;
    if (cluster_x > 0) {
        attribute[n_attribute].id = cudaLaunchAttributeClusterDimension;
        attribute[n_attribute].val.clusterDim.x = cluster_x;
        attribute[n_attribute].val.clusterDim.y = 1;
        attribute[n_attribute].val.clusterDim.z = 1;
        ++n_attribute;
    }
    if (cooperative) {
        attribute[n_attribute].id = cudaLaunchAttributeCooperative;
        attribute[n_attribute].val.cooperative = 1;
        ++n_attribute;
    }
    if (HP_CUDA_PDL) {
        attribute[n_attribute].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[n_attribute].val.programmaticStreamSerializationAllowed = 1;
        ++n_attribute;
    }
    config.attrs = attribute;
    config.numAttrs = n_attribute;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_pdl_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, unsigned cluster_x, cudaStream_t stream,
                          Args &&...args) {
    launch_ex(kernel, grid, block, shared_bytes, cluster_x, false, stream, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args &&...args) {
    launch_pdl_clustered(kernel, grid, block, shared_bytes, 0, stream, std::forward<Args>(args)...);
}

// One warp-level tensor-core product: c[16 rows][8 tokens] += a[16][16] b[16][8], bf16 in, f32 out.
__device__ inline void mma_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Sum of the 8 products of a 16-byte chunk of bf16 weights and activations (widened exactly to
// float32), added to acc in element order.
__device__ inline float dot_chunk(float acc, uint4 w, uint4 x) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 wf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&wv[j]));
        const float2 xf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&xv[j]));
        acc = fmaf(wf.x, xf.x, acc);
        acc = fmaf(wf.y, xf.y, acc);
    }
    return acc;
}

// 1/rms of one input row of a folded norm from its n partial sums of x^2 (warp-collective: every lane
// gets it): lane-strided sums, then a butterfly, the order every kernel that folds the norm uses.
__device__ inline float warp_inv_rms(const float *part, int n, int n_in, float eps) {
    const int lane = threadIdx.x % 32;
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) sum += part[i];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return rsqrtf(sum / float(n_in) + eps);
}

// The GPU's global timer (ns), for the diagnostic traces of the persistent step and the fused MoE kernel.
__device__ inline unsigned long long global_timer() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

// SMs of the current device (asked once per process and device).
inline int device_sm_count() {
    static int count[64] = {};
    int device = 0;
    cudaGetDevice(&device);
    if (device < 0 || device >= 64) return 132;
    if (!count[device]) cudaDeviceGetAttribute(&count[device], cudaDevAttrMultiProcessorCount, device);
    return count[device] > 0 ? count[device] : 132;
}

// A block's partial sums of its 16-row tile, in shared memory: each warp's accumulators acc[m][nb]
// (lane (g, q) holds the m16n8k16 C fragment of rows g, g + 8 and tokens 2q, 2q + 1 of 8-token
// tile nb) are added in warp order into block_sum[m][e], e = token * kTileRows + row (rows fastest:
// stores of 16 consecutive rows coalesce), through one padded scratch slice per warp.
// Deterministic (a fixed order); the gemv and expert kernels share it. W: warps per block.
template <int W, int M, int NB>
struct WarpPartials {
    static constexpr int kStride = kTileRows + 1;  // scratch row stride, padded against bank conflicts
    float scratch[W][NB * 8 * kStride];
    float block_sum[M][kTileRows * NB * 8];  // read by the cluster's first block (distributed shared memory)

    __device__ void add(const float (&acc)[M][NB][4]) {
        constexpr int kPerThread = (kTileRows * NB * 8 + W * 32 - 1) / (W * 32);
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                float *out = scratch[warp] + (nb * 8 + 2 * q) * kStride + g;
                out[0] = acc[m][nb][0];
                out[kStride] = acc[m][nb][1];
                out[8] = acc[m][nb][2];
                out[kStride + 8] = acc[m][nb][3];
            }
            __syncthreads();
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
                const int e = threadIdx.x + i * W * 32;
                if (e >= kTileRows * NB * 8) break;
                float total = 0.0f;
                for (int w = 0; w < W; ++w) total += scratch[w][(e / kTileRows) * kStride + e % kTileRows];
                block_sum[m][e] = total;
            }
            __syncthreads();
        }
    }
};

// What kAccumulate's epilogue reads besides the sums: the residual element and the next norm's
// weight. A kernel with several elements per lane loads them one element ahead (load_prior).
struct Prior {
    float x = 0.0f, norm_w = 0.0f;
};
template <int EPI>
__device__ inline Prior load_prior(const Params &p, const Segment &seg, int token, int row, bool active) {
    Prior prior;
    if constexpr (EPI == kAccumulate) {
        if (active) {
            // The norm weight is loaded with the residual, not after the residual's store (which it could alias).
            if (p.norm_out.h) prior.norm_w = load_bias(p.norm_out.w_dtype, p.norm_out.w, row);
            prior.x = static_cast<const float *>(seg.y)[int64_t(token) * seg.n_out + row];
        }
    }
    return prior;
}

// One output element (token `token` of the step, row `row` of `seg`) of a 16-row tile, sum[m] its
// finished dot products (scaled by 1/rms where the norm is folded): the epilogue the gemv, staged
// and skinny kernels share. All 32 lanes of a warp call it together, 16 consecutive lanes per
// (token, tile): with norm_out those 16 sum the tile's x^2 by shuffles, and `lead` (the first of
// them, for a token of the step) writes it. `active`: the element exists and belongs to the caller.
// `prior`: load_prior's values for the element (kAccumulate).
template <int EPI, int M>
__device__ inline void store_element(const Params &p, const Segment &seg, int token, int row, int tile, bool active, bool lead, const float (&sum)[M],
                                     const Prior &prior) {
    const int64_t at = int64_t(token) * seg.n_out + row;
    const float value = active ? sum[0] + load_bias(seg.bias_dtype, seg.bias, row) : 0.0f;
    if constexpr (EPI == kStore) {
        if (active) static_cast<float *>(seg.y)[at] = value;
    } else if constexpr (EPI == kAccumulate) {
        const float x_new = active ? prior.x + value : 0.0f;
        if (active) static_cast<float *>(seg.y)[at] = x_new;
        if (p.norm_out.h) {  // the next norm's operand, and the tile's x^2 of the token (16 consecutive lanes)
            if (active) p.norm_out.h[at] = __float2bfloat16_rn(x_new * prior.norm_w);
            float square = x_new * x_new;
            for (int offset = kTileRows / 2; offset > 0; offset /= 2) square += __shfl_xor_sync(0xffffffffu, square, offset);
            if (lead) p.norm_out.sum_sq[int64_t(token) * ((seg.n_out + kTileRows - 1) / kTileRows) + tile] = square;
        }
    } else if (active) {
        const float up = sum[M - 1] + load_bias(seg.bias2_dtype, seg.bias2, row);
        static_cast<__nv_bfloat16 *>(seg.y)[at] = __float2bfloat16_rn(value / (1.0f + __expf(-value)) * up);
    }
}
template <int EPI, int M>
__device__ inline void store_element(const Params &p, const Segment &seg, int token, int row, int tile, bool active, bool lead, const float (&sum)[M]) {
    store_element<EPI, M>(p, seg, token, row, tile, active, lead, sum, load_prior<EPI>(p, seg, token, row, active));
}

// Grid (cluster, 16-row tiles of all segments, ceil(n_token / (8 NB))), launched as clusters of
// gridDim.x blocks: the cluster's blocks and their kWarps warps split the inputs of one tile, each
// warp in steps of 32. Lane (g = lane / 4, q = lane % 4) loads the 16 bytes at inputs
// [32 s + 8 q, + 8) of rows g and g + 8 (and of token g's activations): that is exactly its A and
// B fragments of two m16n8k16 products if the 16 inputs of a product are taken in the order the
// lanes hold them (a sum does not care), so the weights go from one 16-byte load straight into the
// tensor cores. NB tiles of 8 tokens share every weight load. Partial sums: warps in a block through
// shared memory, blocks of the cluster through distributed shared memory, both in a fixed order.
// NORM: the result is scaled by 1/rms from x_sum_sq (see the top of the file).
template <int NB, int EPI, bool VEC, bool NORM, bool PIPE>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Params p) {
    constexpr int M = EPI == kSiluMul ? 2 : 1, U = unroll_of(PIPE);
    constexpr int NT = NB * 8;
    constexpr int kTokensPerWarp = (NT + kWarps - 1) / kWarps;
    __shared__ WarpPartials<kWarps, M, NB> partials;
    __shared__ float inv_rms_s[NORM ? NT : 1];
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
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        const int t = t0 + nb * 8 + g;
        x_row[nb] = nb * 8 + g < n_t ? p.x + int64_t(p.x_rows ? p.x_rows[t] : t) * n_in : nullptr;
    }
    // NORM, the cluster's first block: this lane's share of the partial sums of x^2 of the warp's
    // tokens warp, warp + kWarps, ... (loaded right after the wait, reduced after the main loop).
    float sum_sq[NORM ? kTokensPerWarp : 1] = {};
    auto load_sum_sq = [&] {
        if constexpr (NORM) {
            if (blockIdx.x != 0) return;
#pragma unroll
            for (int j = 0; j < kTokensPerWarp; ++j) {
                const int tt = warp + j * kWarps;
                if (tt >= n_t) break;
                const float *part = p.x_sum_sq + int64_t(p.x_rows ? p.x_rows[t0 + tt] : t0 + tt) * p.n_sum_sq;
                for (int i = lane; i < p.n_sum_sq; i += 32) sum_sq[j] += part[i];
            }
        }
    };

    float acc[M][NB][4];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][nb][i] = 0.0f;

    launch_dependents();
    if (kL2Prefetch) prefetch_l2(p.prefetch, linear_block(), grid_blocks());
    // kL2Ahead: the warp's weight slices (U * 64 contiguous bytes per row, 16 rows per
    // matrix) of its iteration `ahead` iterations on: with bulk prefetches lane l < 16 M takes row
    // l % 16 of matrix l / 16, else the lanes take the slices' 128-byte lines in turn.
    auto prefetch_ahead = [&](int s0, int ahead) {
        if constexpr (VEC && kL2Ahead > 0) {
            const int s = s0 + ahead * n_split * U;
            if (s >= n_step) return;
            const int begin = s * 32, end = min(n_in, (s + U) * 32);
            constexpr int kLines = HP_CUDA_L2_PREFETCH_BULK ? 1 : (U * 64 + 127) / 128;  // per row
            for (int i = lane; i < 16 * M * kLines; i += 32) {
                const int row = min(row0 + (i / kLines) % 16, seg.n_out - 1), line = i % kLines;
                const __nv_bfloat16 *w = (M == 2 && i >= 16 * kLines ? seg.w2 : seg.w) + int64_t(row) * n_in;
                if (HP_CUDA_L2_PREFETCH_BULK) prefetch_l2_range(w + begin, uint32_t(end - begin) * 2u);
                else if (begin + line * 64 < end) prefetch_l2_range(w + begin + line * 64, 16);
            }
        }
    };
#pragma unroll
    for (int ahead = 1; ahead < kL2Ahead; ++ahead) prefetch_ahead(split * U, ahead);
    bool waited = false;
    const int first_step = split * U, stride = n_split * U;
    uint4 a[M][2][U];  // this iteration's weights
    auto load_weights = [&](uint4 (&dst)[M][2][U], int s0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = min((s0 + u) * 4 + q, n_chunk - 1);  // clamped; its activations are zero
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) dst[m][h][u] = load_chunk<VEC, true>(w_row[m][h], c, n_in);
        }
    };
    if (PIPE && first_step < n_step) load_weights(a, first_step);
    for (int s0 = first_step; s0 < n_step; s0 += stride) {
        uint4 next[M][2][U];  // PIPE: the next iteration's weights, in flight during this one's products
        const bool more = s0 + stride < n_step;
        if (!PIPE) load_weights(a, s0);
        else if (more) load_weights(next, s0 + stride);
        prefetch_ahead(s0, kL2Ahead);
        if (!waited) {  // the activations (and a residual) are the previous kernel's output
            wait_for_previous_grid();
            waited = true;
            load_sum_sq();
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (s0 + u >= n_step) break;
            const int c = (s0 + u) * 4 + q;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                const uint4 b = x_row[nb] && c < n_chunk ? load_chunk<VEC, false>(x_row[nb], c, n_in) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    mma_16816(acc[m][nb], a[m][0][u].x, a[m][1][u].x, a[m][0][u].y, a[m][1][u].y, b.x, b.y);
                    mma_16816(acc[m][nb], a[m][0][u].z, a[m][1][u].z, a[m][0][u].w, a[m][1][u].w, b.z, b.w);
                }
            }
        }
        if (PIPE && more) {
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int m = 0; m < M; ++m)
#pragma unroll
                    for (int h = 0; h < 2; ++h) a[m][h][u] = next[m][h][u];
        }
    }
    if (!waited) {
        wait_for_previous_grid();
        load_sum_sq();
    }
    if constexpr (NORM) {
        if (blockIdx.x == 0) {
#pragma unroll
            for (int j = 0; j < kTokensPerWarp; ++j) {
                const int tt = warp + j * kWarps;
                float total = sum_sq[j];
                for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
                if (lane == 0 && tt < NT) inv_rms_s[tt] = rsqrtf(total / float(n_in) + p.norm_eps);
            }
        }
    }

    // The warps' partials in warp order, then the blocks' in cluster rank order.
    constexpr int kPerThread = (kTileRows * NT + kWarps * 32 - 1) / (kWarps * 32);
    partials.add(acc);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's partial is in its shared memory
    if (blockIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = threadIdx.x + i * kWarps * 32, t = e / kTileRows, row = row0 + e % kTileRows;
            if (e >= kTileRows * NT) break;  // uniform per warp: kTileRows * NT is a multiple of 32
            const bool active = t < n_t && row < seg.n_out;
            float sum[M];
#pragma unroll
            for (int m = 0; m < M; ++m) {
                sum[m] = partials.block_sum[m][e];
                for (unsigned rank = 1; rank < gridDim.x; ++rank) sum[m] += cluster.map_shared_rank(&partials.block_sum[m][0], rank)[e];
                if constexpr (NORM) sum[m] *= inv_rms_s[t];
            }
            store_element<EPI, M>(p, seg, t0 + t, row, row0 / kTileRows, active, e % kTileRows == 0 && t < n_t, sum);
        }
    }
    cluster.sync();  // keep every block's shared memory alive until the first block has read it
}

inline bool aligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Blocks per cluster for a step: the fewest (a power of two up to HP_CUDA_GEMV_MAX_CLUSTER) that
// give at least HP_CUDA_GEMV_TARGET_WARPS warps over all tiles, but no more than leaves every warp
// one full iteration of the input loop (small matrices are latency-bound: spread them out).
inline int cluster_size(int tiles, int n_in, int unroll) {
    const int n_step = ((n_in + 7) / 8 + 3) / 4;
    int size = 1;
    while (size < HP_CUDA_GEMV_MAX_CLUSTER && int64_t(tiles) * size * kWarps < HP_CUDA_GEMV_TARGET_WARPS &&
           2 * size * kWarps * unroll <= n_step) {
        size *= 2;
    }
    return size;
}

template <int NB, int EPI, bool PIPE>
void launch_tokens(const Params &p, dim3 grid, bool vec, cudaStream_t stream) {
    void (*kernel)(Params) = p.x_sum_sq ? (vec ? gemv_kernel<NB, EPI, true, true, PIPE> : gemv_kernel<NB, EPI, false, true, PIPE>)
                                        : (vec ? gemv_kernel<NB, EPI, true, false, PIPE> : gemv_kernel<NB, EPI, false, false, PIPE>);
    launch_pdl_clustered(kernel, grid, dim3(kWarps * 32), 0, grid.x, stream, p);
}

// Tiles of 8 tokens per pass of a launch of n_token tokens (1, 2, 4 or 8: the kernels' NB).
inline int token_tiles(int n_token) { return n_token <= 8 ? 1 : n_token <= 16 ? 2 : n_token <= 32 ? 4 : 8; }

// Fills the segments' first_block, picks the token tiles per pass, the cluster size and the load
// path, and launches gemv_kernel on `stream`. EPI is the same for every segment.
template <int EPI>
void launch_cluster(Params p, cudaStream_t stream) {
    if (p.n_token <= 0 || p.n_segment <= 0) return;
    int tiles = 0;
    bool vec = p.n_in % 8 == 0 && aligned16(p.x);
    for (int s = 0; s < p.n_segment; ++s) {
        p.segment[s].first_block = tiles;
        tiles += (p.segment[s].n_out + kTileRows - 1) / kTileRows;
        vec = vec && aligned16(p.segment[s].w) && (EPI != kSiluMul || aligned16(p.segment[s].w2));
    }
    const int nb = token_tiles(p.n_token);
    auto go = [&](auto pipeline) {
        constexpr bool PIPE = decltype(pipeline)::value;
        const dim3 grid(unsigned(cluster_size(tiles, p.n_in, unroll_of(PIPE))), unsigned(tiles), unsigned((p.n_token + 8 * nb - 1) / (8 * nb)));
        switch (nb) {
            case 1: launch_tokens<1, EPI, PIPE>(p, grid, vec, stream); break;
            case 2: launch_tokens<2, EPI, PIPE>(p, grid, vec, stream); break;
            case 4: launch_tokens<4, EPI, PIPE>(p, grid, vec, stream); break;
            default: launch_tokens<8, EPI, PIPE>(p, grid, vec, stream); break;
        }
    };
    if constexpr (kPipelineMinTokens > 0) {
        if (p.n_token >= kPipelineMinTokens) return go(std::true_type{});
    }
    go(std::false_type{});
}

}  // namespace hp_cuda_gemv

#include "gemv_staged.cuh"
#include "gemm_skinny.cuh"

namespace hp_cuda_gemv {

// The decode GEMV on `stream`: the staged kernel (gemv_staged.cuh) for the one-token launches whose
// shapes it takes and whose epilogue's bit is set in knob gemv_staged (bit EPI: 1 store, 2 residual
// accumulate, 4 SwiGLU), the skinny GEMM (gemm_skinny.cuh) for launches of at least
// skinny_min_tokens tokens that it takes (and that allow it: Params::skinny), else the clustered
// gemv_kernel (takes_skinny, below, says which). A q/k/v launch given p.head takes the skinny GEMM
// (the caller asked skinny_head_fits).
inline bool takes_skinny(const Params &p, int epi);
template <int EPI>
void launch(const Params &p, cudaStream_t stream) {
    if ((HP_CUDA_GEMV_STAGED >> EPI & 1) && staged_fits(p, EPI) && p.head.d_head == 0) return launch_staged<EPI>(p, stream);
    if (p.head.d_head > 0 || takes_skinny(p, EPI)) return launch_skinny<EPI>(p, stream);
    launch_cluster<EPI>(p, stream);
}

// Whether launch() runs `p` (epilogue epi, no p.head) on the skinny GEMM.
inline bool takes_skinny(const Params &p, int epi) {
    if ((HP_CUDA_GEMV_STAGED >> epi & 1) && staged_fits(p, epi)) return false;
    return p.skinny && HP_CUDA_SKINNY_MIN_TOKENS > 0 && p.n_token >= HP_CUDA_SKINNY_MIN_TOKENS && skinny_fits(p, epi);
}

// Whether the q/k/v launch `p` (segments q, k, v, kStore, p.head set) may run the head epilogue:
// knob skinny_head (and room for it: kSkinnyHeadRoom), launch() would take the skinny GEMM anyway,
// and every block's rows are whole heads of one segment.
inline bool skinny_head_fits(const Params &p) {
    const int d = p.head.d_head, rows = skinny_rows_of(kStore);
    const bool whole_heads = d >= 2 && d % 2 == 0 && rows % d == 0 &&
                             std::all_of(p.segment, p.segment + kMaxSegments, [&](const Segment &s) { return s.n_out % d == 0; });
    return kSkinnyHeadRoom && whole_heads && p.n_segment == 3 && takes_skinny(p, kStore);
}

}  // namespace hp_cuda_gemv
