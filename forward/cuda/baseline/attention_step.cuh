// One warp step of the CUDA-core flash-decoding kernel (attention.cuh): a lane's kFdUnroll 16-byte
// loads of K rows scored against the GQA group's query heads, the online-softmax update (base 2) and
// the products with the V rows, in the two forms of knob attn_fd_scatter_scores: every score summed
// over its row's lanes by a butterfly and every lane updating every head (0), or the scores
// reduce-scattered so that each lane updates only its own heads (1, 2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <hotpass/forward_abi.h>

#include "knobs.h"

namespace hp_cuda_baseline {

// One 16-byte copy global -> shared of this thread, outside L1 (K/V rows and o_proj slices are read once a step).
__device__ inline void fd_cp_async16(void *shared, const void *global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
#endif
}

// 16-byte K loads (and as many V loads) in flight per lane in a warp step (knob attn_fd_unroll).
constexpr int kFdUnroll = HP_CUDA_ATTN_FD_UNROLL;

// Eight 16-bit cache elements as float (bf16: the high half of a float; f16: converted).
template <hp_dtype KV>
__device__ inline void unpack8(const uint4 raw, float out[8]) {
    const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if constexpr (KV == HP_DTYPE_BF16) {
            out[2 * j] = __uint_as_float(word[j] << 16);
            out[2 * j + 1] = __uint_as_float(word[j] & 0xffff0000u);
        } else {
            const float2 pair = __half22float2(*reinterpret_cast<const __half2 *>(&word[j]));
            out[2 * j] = pair.x;
            out[2 * j + 1] = pair.y;
        }
    }
}

// Two 16-bit values in one register, x0 in the low half (the lower k or n index of an
// attention_mma.cuh fragment; the lower element of a cache chunk).
template <hp_dtype KV>
__device__ inline uint32_t pack16x2(float x0, float x1) {
    if constexpr (KV == HP_DTYPE_BF16) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);
        return *reinterpret_cast<const uint32_t *>(&v);
    } else {
        const __half2 v = __floats2half2_rn(x0, x1);
        return *reinterpret_cast<const uint32_t *>(&v);
    }
}

// Knob attn_fd_scatter_scores: the G partial dot products of a lane (one per query head, over its
// 8-element chunk of a K row) summed over the L lanes of the row by a reduce-scatter instead of G
// butterfly sums. At each of the first log2(G / H) stages (offset L/2, L/4, ...) a lane keeps half
// of its values, the lower or upper half by the offset's bit of `chunk`, and adds its partner's
// partial of the same heads (one shuffle per kept value); the stages after that are plain
// butterflies on the H values left. Then v[0..H) hold the full scores of heads fd_scatter_head0 + i,
// H = fd_scatter_heads: G - 1 + log2(L / G) shuffles where G <= L (qwen3-30b-a3b, L 16, G 8: 8 instead
// of 32), and a lane's softmax works on its H heads only.
template <int G, int L>
__host__ __device__ constexpr int fd_scatter_heads() { return G > L ? G / L : 1; }
template <int G, int L>
__device__ inline int fd_scatter_head0(int chunk) { return G > L ? chunk * (G / L) : chunk / (L / G); }
template <int G, int L>
__host__ __device__ constexpr int fd_scatter_lanes() { return G > L ? 1 : L / G; }  // lanes of a row that hold the same heads
template <int G, int L>
__device__ inline void fd_scatter_sum(float (&v)[G], int chunk) {
    constexpr int H = fd_scatter_heads<G, L>();
#pragma unroll
    for (int stage = 0; (L >> stage) > 1; ++stage) {
        const int offset = L >> (stage + 1), n = G >> stage;  // values a lane holds before the stage
        if (n > H) {
            const bool upper = chunk & offset;
#pragma unroll
            for (int i = 0; i < n / 2; ++i) {
                const float keep = upper ? v[i + n / 2] : v[i], send = upper ? v[i] : v[i + n / 2];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
            }
        } else {
#pragma unroll
            for (int i = 0; i < H; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
        }
    }
}

// The online-softmax update of one head over a warp step (base 2): s, the scores of this lane's
// kFdUnroll positions (-inf where dropped), becomes their exp2(s - m_new) with m_new the running max
// m raised to the step's (over the lane's positions and the warp's rows of L lanes: the same in every
// lane of the head); l is rescaled and takes the new sum. Returns the rescale exp2(m - m_new) of the
// head's earlier output.
template <int L>
__device__ inline float fd_softmax_update(float (&s)[kFdUnroll], float &m, float &l) {
    float step_max = s[0];
#pragma unroll
    for (int u = 1; u < kFdUnroll; ++u) step_max = fmaxf(step_max, s[u]);
#pragma unroll
    for (int offset = L; offset < 32; offset *= 2) step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, offset));
    const float m_new = fmaxf(m, step_max);  // finite: a step holds at least one valid position
    const float alpha = exp2f(m - m_new);     // 0 on the first step (m = -inf)
    m = m_new;
    l *= alpha;
#pragma unroll
    for (int u = 0; u < kFdUnroll; ++u) {
        s[u] = exp2f(s[u] - m_new);  // 0 for dropped positions
        l += s[u];
    }
    return alpha;
}

// One warp step of decode_attention_kernel (knob attn_fd_scatter_scores 0): each score summed over
// the L lanes of its row by a butterfly (every lane gets it), the step's max made warp-uniform, and every
// lane updating the running max m, sum l and output acc of every head (exp2 of every head's scores).
template <hp_dtype KV, int G, int L>
__device__ inline void fd_butterfly_step(const float (&q_r)[G][8], const uint4 (&k_raw)[kFdUnroll], const uint4 (&v_raw)[kFdUnroll],
                                         const bool (&valid)[kFdUnroll], float (&m)[G], float (&l)[G], float (&acc)[G][8]) {
    float s[G][kFdUnroll];
#pragma unroll
    for (int u = 0; u < kFdUnroll; ++u) {
        float k8[8];
        unpack8<KV>(k_raw[u], k8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float dot = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e) dot += q_r[h][e] * k8[e];
#pragma unroll
            for (int offset = 1; offset < L; offset *= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
            s[h][u] = valid[u] ? dot : -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
        const float alpha = fd_softmax_update<L>(s[h], m[h], l[h]);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < kFdUnroll; ++u) {
        float v8[8];
        unpack8<KV>(v_raw[u], v8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] += s[h][u] * v8[e];
        }
    }
}

// One warp step of decode_attention_kernel with knob attn_fd_scatter_scores: the lane's scores of
// its kFdUnroll positions (rows of L lanes) reduced by fd_scatter_sum, so that each lane takes the
// online-softmax update (running max m, sum l, exp2) of its H heads alone (m[0..H), l[0..H); the
// butterfly form exponentiates every head's scores in every lane: 8 times the exp2 at qwen3-30b-a3b's
// group of 8). Every head's rescale and probabilities then reach the lanes of every chunk of V
// (acc[G][8] as in the other form): SCATTER 1 by shuffles (G + kFdUnroll * G a step), 2 through the
// warp's slice of shared memory (H * (kFdUnroll + 1) stores, (kFdUnroll + 1) * G / 4 16-byte loads;
// fd_scatter_bytes).
// The static shared memory fd_scatter_step takes in a block of W warps (SCATTER 2; rows of L lanes):
// [W][kFdUnroll + 1][32 / L][G] floats, the probabilities at [u][row], the rescales at [kFdUnroll][0].
template <int SCATTER, int W, int G, int L>
__host__ __device__ constexpr size_t fd_scatter_bytes() {
    return SCATTER == 2 ? size_t(W) * (kFdUnroll + 1) * (32 / L) * G * sizeof(float) : 0;
}

template <hp_dtype KV, int G, int L, int SCATTER, int W>
__device__ inline void fd_scatter_step(const float (&q_r)[G][8], const uint4 (&k_raw)[kFdUnroll], const uint4 (&v_raw)[kFdUnroll],
                                       const bool (&valid)[kFdUnroll], float (&m)[G], float (&l)[G], float (&acc)[G][8], int warp, int lane) {
    constexpr int H = fd_scatter_heads<G, L>(), kSameHeads = fd_scatter_lanes<G, L>(), kRows = 32 / L;
    const int chunk = lane % L, sub = lane / L, head0 = fd_scatter_head0<G, L>(chunk);
    float p[H][kFdUnroll];
#pragma unroll
    for (int u = 0; u < kFdUnroll; ++u) {
        float k8[8];
        unpack8<KV>(k_raw[u], k8);
        float dot[G];
#pragma unroll
        for (int h = 0; h < G; ++h) {
            dot[h] = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e) dot[h] += q_r[h][e] * k8[e];
        }
        fd_scatter_sum<G, L>(dot, chunk);
#pragma unroll
        for (int i = 0; i < H; ++i) p[i][u] = valid[u] ? dot[i] : -INFINITY;
    }
    float alpha[H];
#pragma unroll
    for (int i = 0; i < H; ++i) alpha[i] = fd_softmax_update<L>(p[i], m[i], l[i]);
    if constexpr (SCATTER == 1) {
        // Head h's values are in lane h / H * kSameHeads of each row (the max is uniform over rows).
#pragma unroll
        for (int h = 0; h < G; ++h) {
            const float a = __shfl_sync(0xffffffffu, alpha[h % H], h / H * kSameHeads);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] *= a;
        }
#pragma unroll
        for (int u = 0; u < kFdUnroll; ++u) {
            float v8[8];
            unpack8<KV>(v_raw[u], v8);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                const float w = __shfl_sync(0xffffffffu, p[h % H][u], sub * L + h / H * kSameHeads);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[h][e] += w * v8[e];
            }
        }
    } else {
        static_assert(G % 4 == 0, "attn_fd_scatter_scores 2: a group of 4 or 8 (16-byte loads)");
        // [warp][u][row][head]: the probabilities; [warp][kFdUnroll][0][head]: the rescales (fd_scatter_bytes).
        __shared__ __align__(16) float shared[W][kFdUnroll + 1][kRows][G];
        static_assert(sizeof(shared) == fd_scatter_bytes<SCATTER, W, G, L>());
        __syncwarp();  // the warp's reads of the previous step are done
        if (chunk % kSameHeads == 0) {
#pragma unroll
            for (int i = 0; i < H; ++i) {
#pragma unroll
                for (int u = 0; u < kFdUnroll; ++u) shared[warp][u][sub][head0 + i] = p[i][u];
                if (sub == 0) shared[warp][kFdUnroll][0][head0 + i] = alpha[i];
            }
        }
        __syncwarp();
        auto load_heads = [&](const float *from, float (&to)[G]) {
#pragma unroll
            for (int j = 0; j < G / 4; ++j) {
                const float4 four = reinterpret_cast<const float4 *>(from)[j];
                to[4 * j] = four.x;
                to[4 * j + 1] = four.y;
                to[4 * j + 2] = four.z;
                to[4 * j + 3] = four.w;
            }
        };
        float a[G];
        load_heads(shared[warp][kFdUnroll][0], a);
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] *= a[h];
        }
#pragma unroll
        for (int u = 0; u < kFdUnroll; ++u) {
            float w[G], v8[8];
            load_heads(shared[warp][u][sub], w);
            unpack8<KV>(v_raw[u], v8);
#pragma unroll
            for (int h = 0; h < G; ++h) {
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[h][e] += w[h] * v8[e];
            }
        }
    }
}

}  // namespace hp_cuda_baseline
