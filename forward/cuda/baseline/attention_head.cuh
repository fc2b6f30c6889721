// Knob attn_fd_head: the head kernel's work (kernels.cuh head_kernel: bias, the per-head q/k RMSNorm,
// RoPE, the newest K and V rows into the paged cache) done in the CUDA-core flash-decoding kernel's
// prologue (attention.cuh), for decode steps (every token alone in its sequence) whose q/k/v launch
// left it undone: the GEMV's plain store, as qwen3-30b-a3b's q/k/v at batch 1 (d_head 128: the skinny
// GEMM's head epilogue takes d_head 64). One launch and one dependent-launch boundary fewer a layer.
//
// In registers, in the kernel's lane layout: a lane holds 8-element chunk `chunk` of a row, the row's
// d_head / 8 lanes consecutive (L = d_head / 8), so a head's sum of squares is a butterfly over L
// lanes and RoPE's rotate-half partner of element i (i +- d_head / 2) sits in lane chunk ^ (L / 2),
// same element. Every warp prepares every query head of its block's group (the lanes of a warp load
// hold different positions but the same q); the one warp whose steps hold the newest position also
// prepares that position's K and V rows of its kv head and writes them to the cache before it loads
// them (its own loads, after __syncwarp: no other warp or block reads that row in the step).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <hotpass/forward_abi.h>

#include "attention_step.cuh"
#include "gemv.cuh"
#include "knobs.h"

namespace hp_cuda_baseline {

constexpr bool kFdHead = HP_CUDA_ATTN_FD_HEAD != 0;

// What the kernel needs to do the head kernel's work (null k: not folded; q is ready and the newest
// rows are written, by the head kernel or the q/k/v launch's epilogue).
struct FdHead {
    const float *k = nullptr, *v = nullptr;  // the q/k/v launch's k and v, f32 [token][n_head_kv][d_head] (q: the kernel's q, f32 [token][n_head][d_head])
    hp_dtype bias_dtype = HP_DTYPE_F32;
    const void *bq = nullptr, *bk = nullptr, *bv = nullptr;  // optional, [n_head or n_head_kv][d_head]
    hp_dtype norm_dtype = HP_DTYPE_F32;
    const void *q_norm = nullptr, *k_norm = nullptr;  // optional [d_head]
    const float *inv_freq = nullptr;                  // [d_head / 2]
    float eps = 0.0f;
};
// Preconditions (forward.cu's attention_folds_head): every token alone in its sequence and one block per
// GQA group (attn_fd_head_split 1), so that the row's one writer is the warp that reads it.

// The rotation of a lane's 8 elements (chunk * 8 + e) at `position`, as the head kernel computes it:
// cos, and sin signed for the rotate-half pairing (x * cos + partner * sin: -sin in the first half).
template <int D>
__device__ inline void fd_head_rotation(const float *inv_freq, int position, int chunk, float (&cos_a)[8], float (&sin_a)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const int i = chunk * 8 + e, j = i < D / 2 ? i : i - D / 2;
        float s, c;
        sincosf(float(position) * inv_freq[j], &s, &c);
        cos_a[e] = c;
        sin_a[e] = i < D / 2 ? -s : s;
    }
}

// A lane's 8 weights of a d_head vector (a norm's, or a head's bias row from `at`), 0 without one.
__device__ inline void fd_head_weights(hp_dtype dtype, const void *w, int64_t at, float (&out)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = hp_cuda_gemv::load_bias(dtype, w, int(at + e));
}

// One head's chunk x (bias added): RMSNorm over the row's L lanes (with_norm: weights w), then RoPE.
// Every lane of the warp calls it (shuffles over the whole warp).
template <int L>
__device__ inline void fd_head_finish(float (&x)[8], bool with_norm, const float (&w)[8], float eps, const float (&cos_a)[8], const float (&sin_a)[8]) {
    if (with_norm) {
        float sum_sq = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) sum_sq += x[e] * x[e];
#pragma unroll
        for (int offset = L / 2; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
        const float scale = rsqrtf(sum_sq / float(8 * L) + eps);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = x[e] * scale * w[e];
    }
    float partner[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) partner[e] = __shfl_xor_sync(0xffffffffu, x[e], L / 2);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = x[e] * cos_a[e] + partner[e] * sin_a[e];
}

// Eight floats as eight 16-bit cache elements (one 16-byte store; unpack8's inverse).
template <hp_dtype KV>
__device__ inline uint4 fd_head_pack8(const float (&x)[8]) {
    return make_uint4(pack16x2<KV>(x[0], x[1]), pack16x2<KV>(x[2], x[3]), pack16x2<KV>(x[4], x[5]), pack16x2<KV>(x[6], x[7]));
}

// The newest position's K and V rows of kv head g (token t) into the layer's cache at element offset `row`
// (the row's start + g * D): k with bias, k_norm and RoPE, v with bias. Every lane of one warp calls
// it (every sub-row of the warp computes the same row, so that the shuffles see all 32 lanes); the
// lanes of the first (sub 0) store their chunk, then __syncwarp orders those stores before the warp's
// loads of the row.
template <hp_dtype KV, int D>
__device__ inline void fd_head_write_newest(const FdHead &h, void *k_cache, void *v_cache, int n_head_kv, int t, int g, int chunk, int sub, int64_t row,
                                            const float (&k_norm_w)[8], const float (&cos_a)[8], const float (&sin_a)[8]) {
    constexpr int L = D / 8;
    const int64_t at = (int64_t(t) * n_head_kv + g) * D + chunk * 8;
    float k[8], v[8], bias_k[8], bias_v[8];
    fd_head_weights(h.bias_dtype, h.bk, int64_t(g) * D + chunk * 8, bias_k);
    fd_head_weights(h.bias_dtype, h.bv, int64_t(g) * D + chunk * 8, bias_v);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        k[e] = h.k[at + e] + bias_k[e];
        v[e] = h.v[at + e] + bias_v[e];
    }
    fd_head_finish<L>(k, h.k_norm != nullptr, k_norm_w, h.eps, cos_a, sin_a);
    if (sub == 0) {
        *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(k_cache) + row + chunk * 8) = fd_head_pack8<KV>(k);
        *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(v_cache) + row + chunk * 8) = fd_head_pack8<KV>(v);
    }
    __syncwarp();
}

// The group's q heads for this lane (head0 + h, h < group; the others 0), from the q/k/v launch's
// output with bias, q_norm and RoPE, scaled by scale_log2 (as the kernel holds q). Every head's loads
// go out before the first head's shuffles, as the kernel's plain q load has them all in flight at once.
template <int D, int G>
__device__ inline void fd_head_prepare_q(const FdHead &h, const float *q, int n_head, int t, int head0, int group, int chunk, float scale_log2,
                                         const float (&q_norm_w)[8], const float (&cos_a)[8], const float (&sin_a)[8], float (&q_r)[G][8]) {
    constexpr int L = D / 8;
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
        const int64_t at = (int64_t(t) * n_head + head0 + hh) * D + chunk * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) q_r[hh][e] = hh < group ? q[at + e] : 0.0f;
    }
    if (h.bq) {
#pragma unroll
        for (int hh = 0; hh < G; ++hh) {
            float bias[8];
            // (heads past the group read the last head's bias, in range, and add nothing)
            fd_head_weights(h.bias_dtype, h.bq, int64_t(head0 + min(hh, group - 1)) * D + chunk * 8, bias);
#pragma unroll
            for (int e = 0; e < 8; ++e) q_r[hh][e] += hh < group ? bias[e] : 0.0f;
        }
    }
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
        if (hh < group) {  // uniform over the block: the shuffles see every lane
            fd_head_finish<L>(q_r[hh], h.q_norm != nullptr, q_norm_w, h.eps, cos_a, sin_a);
#pragma unroll
            for (int e = 0; e < 8; ++e) q_r[hh][e] *= scale_log2;
        }
    }
}

}  // namespace hp_cuda_baseline
