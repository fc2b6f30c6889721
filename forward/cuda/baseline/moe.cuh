// Grouped MoE decode of the CUDA baseline (knob moe_kernel 1): every routed expert's weights are
// read once per step for all the tokens that chose it.
//
//   route_group_kernel   (moe_route.cuh) routing and the per-expert token lists.
//   expert_gemv_kernel   bf16 weights of one active expert (grid z) x its tokens, float32
//                        accumulation on tensor cores (the decode GEMV's scheme, gemv.cuh: 16-byte
//                        streaming loads straight into mma.sync m16n8k16 fragments, a 16-row tile
//                        per cluster whose blocks and warps split n_in, fixed-order reduction).
//                        kSiluMul: gate and up of the expert, act[pos] = bf16(weight * silu(g) * u)
//                        in grouped order (the routing weight folded in); kStore: down_proj of the
//                        grouped act, out[pair] (float32) per (token, slot).
//   expert_down_single_kernel   one-token steps: down_proj of the k experts as one GEMV over the
//                        concatenated act, accumulated into the residual with gemv.cuh's folded-norm
//                        epilogue (no combine).
//   expert_gate_up_single_kernel   one-token steps with knob moe_single_route (off by default):
//                        one warp per row of d_ff, the block routing the token itself.
//   moe_combine_norm_kernel   x[t] += sum over slots of out[t * k + slot] in slot order (+ the gated
//                        shared expert), and optionally the next RMSNorm's bf16 operand of x.
//
// Launch shapes depend only on n_token and the config: the expert grid has z = min(n_expert,
// n_token * k) slots and a block past n_active returns, so a step stays graph-capturable. The
// experts are known only once routing is done, so the expert kernels cannot stream weights before
// griddepcontrol.wait as the dense GEMVs do. Where a pair lands in its expert's list (shared
// atomics) changes no value: each output column of an MMA is computed alone, and the combine adds
// slots in slot order, so a step is deterministic.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <hotpass/forward_abi.h>

#include "gemv.cuh"
#include "knobs.h"
#include "moe_route.cuh"

namespace hp_cuda_moe {

using hp_cuda_gemv::kTileRows;

constexpr int kWarps = HP_CUDA_MOE_WARPS;     // warps of an expert-GEMV block, splitting a tile's inputs
constexpr int kUnroll = HP_CUDA_MOE_UNROLL;   // steps of 32 inputs per warp iteration (2 * this 16-byte loads per matrix in flight)

struct ExpertParams {
    const __nv_bfloat16 *const *w = nullptr;   // device table [n_expert] of bf16 [n_out][n_in]: gate, or down
    const __nv_bfloat16 *const *w2 = nullptr;  // kSiluMul: the up table
    const __nv_bfloat16 *x = nullptr;          // kSiluMul: bf16 [n_token][n_in] (token rows); kStore: bf16 [n_pair][n_in] (grouped rows)
    const float *inv_rms = nullptr;            // kSiluMul, optional [n_token]: scales gate and up (folded norm)
    void *y = nullptr;                         // kSiluMul: bf16 act [n_pair][n_out] (grouped rows); kStore: f32 [n_pair][n_out] (pair rows)
    Routing routing;
    int n_in = 0, n_out = 0, k = 0, n_token = 0;
    int tiles_per_block = 1;                   // 16-row tiles a block (cluster) takes in turn: the routing look-ups are paid once
};

// Grid (cluster, ceil(n_out / 16) tiles, min(n_expert, n_token * k) expert slots), clusters of
// gridDim.x blocks. The block of slot z serves active expert z, its tokens in passes of 8 NB (a
// pass reads the tile's weights again: only when an expert has more than 8 NB tokens). Lane
// (g, q) holds the A fragments of rows g, g + 8 and the B fragment of the pass's token g, as in
// gemv.cuh's gemv_kernel; only the 8-token groups the expert has are multiplied.
// EPI kStore (down_proj) reads the routing and issues its first weight loads before waiting for the
// previous kernel (gate/up): gate/up lets its dependents launch only after its own wait, by which
// time the routing kernel has completed.
template <int NB, int EPI, bool VEC>
__global__ void __launch_bounds__(kWarps * 32) expert_gemv_kernel(const ExpertParams p) {
    constexpr bool kEarly = EPI == hp_cuda_gemv::kStore;
    constexpr int M = EPI == hp_cuda_gemv::kSiluMul ? 2 : 1;
    constexpr int NT = NB * 8;
    __shared__ hp_cuda_gemv::WarpPartials<kWarps, M, NB> partials;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int n_split = gridDim.x * kWarps, split = blockIdx.x * kWarps + warp;
    const int n_in = p.n_in, n_chunk = (n_in + 7) / 8, n_step = (n_chunk + 3) / 4;
    if constexpr (!kEarly) {
        hp_cuda_gemv::wait_for_previous_grid();  // the routing comes from the previous kernel
        hp_cuda_gemv::launch_dependents();
    }
    bool waited = !kEarly;
    auto wait_once = [&] {
        if (!waited) {
            hp_cuda_gemv::wait_for_previous_grid();
            hp_cuda_gemv::launch_dependents();
            waited = true;
        }
    };
    // The four routing loads are independent (slot < n_expert: in bounds even when inactive), so the
    // weight loads wait on two round trips (routing, then the expert's table entry), not three.
    const int slot = blockIdx.z;
    const int n_active = *p.routing.n_active, expert = p.routing.active_expert[slot];
    const int begin = p.routing.group_start[slot], end = p.routing.group_start[slot + 1];
    if (slot >= n_active) {  // the whole cluster: its blocks share z
        wait_once();
        return;
    }
    const int count = end - begin;
    const __nv_bfloat16 *w_base = p.w[expert], *w2_base = M == 2 ? p.w2[expert] : nullptr;
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    constexpr int kPerThread = (kTileRows * NT + kWarps * 32 - 1) / (kWarps * 32);
    const int n_tile = (p.n_out + kTileRows - 1) / kTileRows, tile_end = min(n_tile, int(blockIdx.y + 1) * p.tiles_per_block);
    for (int tile = blockIdx.y * p.tiles_per_block; tile < tile_end; ++tile) {  // uniform per cluster (blocks share y)
        const int row0 = tile * kTileRows;
        const __nv_bfloat16 *w_row[M][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t row = min(row0 + g + 8 * h, p.n_out - 1);
            w_row[0][h] = w_base + row * n_in;
            if constexpr (M == 2) w_row[M - 1][h] = w2_base + row * n_in;
        }
        for (int pass = 0; pass < count; pass += NT) {
            const int n_t = min(NT, count - pass), n_group = (n_t + 7) / 8;
            const __nv_bfloat16 *x_row[NB];
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                const int i = nb * 8 + g;
                const int pos = begin + pass + i;
                if (i >= n_t) x_row[nb] = nullptr;
                else if constexpr (EPI == hp_cuda_gemv::kSiluMul) x_row[nb] = p.x + int64_t(p.routing.group_pair[pos] / p.k) * n_in;
                else x_row[nb] = p.x + int64_t(pos) * n_in;
            }
            float acc[M][NB][4];
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[m][nb][i] = 0.0f;
            for (int s0 = split * kUnroll; s0 < n_step; s0 += n_split * kUnroll) {
                uint4 a[M][2][kUnroll];
#pragma unroll
                for (int u = 0; u < kUnroll; ++u) {
                    const int c = min((s0 + u) * 4 + q, n_chunk - 1);  // clamped; its activations are zero
#pragma unroll
                    for (int m = 0; m < M; ++m)
#pragma unroll
                        for (int h = 0; h < 2; ++h) a[m][h][u] = hp_cuda_gemv::load_chunk<VEC, true>(w_row[m][h], c, n_in);
                }
                wait_once();  // the activations are the previous kernel's output
#pragma unroll
                for (int u = 0; u < kUnroll; ++u) {
                    if (s0 + u >= n_step) break;
                    const int c = (s0 + u) * 4 + q;
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) {
                        if (nb >= n_group) break;  // warp-uniform: the expert has no tokens here
                        const uint4 b = x_row[nb] && c < n_chunk ? hp_cuda_gemv::load_chunk<VEC, false>(x_row[nb], c, n_in) : make_uint4(0, 0, 0, 0);
#pragma unroll
                        for (int m = 0; m < M; ++m) {
                            hp_cuda_gemv::mma_16816(acc[m][nb], a[m][0][u].x, a[m][1][u].x, a[m][0][u].y, a[m][1][u].y, b.x, b.y);
                            hp_cuda_gemv::mma_16816(acc[m][nb], a[m][0][u].z, a[m][1][u].z, a[m][0][u].w, a[m][1][u].w, b.z, b.w);
                        }
                    }
                }
            }
            wait_once();  // a warp without inputs to take still waits before the epilogue writes
            // Warps' partials in warp order, then the cluster's blocks in rank order (as gemv.cuh).
            partials.add(acc);
            cluster.sync();
            if (blockIdx.x == 0) {
#pragma unroll
                for (int i = 0; i < kPerThread; ++i) {
                    const int e = threadIdx.x + i * kWarps * 32, t = e / kTileRows, row = row0 + e % kTileRows;
                    if (e >= kTileRows * NT) break;
                    if (t >= n_t || row >= p.n_out) continue;
                    float sum[M];
#pragma unroll
                    for (int m = 0; m < M; ++m) {
                        sum[m] = partials.block_sum[m][e];
                        for (unsigned rank = 1; rank < gridDim.x; ++rank) sum[m] += cluster.map_shared_rank(&partials.block_sum[m][0], rank)[e];
                    }
                    const int pos = begin + pass + t, pair = p.routing.group_pair[pos];
                    if constexpr (EPI == hp_cuda_gemv::kSiluMul) {
                        const float scale = p.inv_rms ? p.inv_rms[pair / p.k] : 1.0f;
                        const float gate = sum[0] * scale, up = sum[M - 1] * scale;
                        static_cast<__nv_bfloat16 *>(p.y)[int64_t(pos) * p.n_out + row] =
                            __float2bfloat16_rn(p.routing.expert_weight[pair] * (gate / (1.0f + __expf(-gate)) * up));
                    } else {
                        static_cast<float *>(p.y)[int64_t(pair) * p.n_out + row] = sum[0];
                    }
                }
            }
            cluster.sync();  // shared memory stays alive (and unused) until the first block has read it
        }
    }
}

// A one-token step's routing as route_group_kernel writes it (expert_index, expert_weight by slot;
// the lists: k active experts in id order, one pair each; 1/rms when `folded`; counts += picks),
// from `route` (route_single's result), by one whole warp.
__device__ inline void write_single_routing(const SingleRoute &route, int k, const Routing &r, int32_t *expert_counts, bool folded, float inv_rms) {
    const int lane = threadIdx.x % 32;
    for (int j = lane; j < k; j += 32) {
        const int slot = route.slot[j];
        r.expert_index[slot] = route.expert[j];
        r.expert_weight[slot] = route.weight[j];
        r.active_expert[j] = route.expert[j];
        r.group_start[j] = j;
        r.group_pair[j] = slot;
        if (expert_counts) atomicAdd(expert_counts + route.expert[j], 1);
    }
    if (lane == 0) {
        *r.n_active = k;
        r.group_start[k] = k;
        if (folded) r.inv_rms[0] = inv_rms;
    }
}

// The residual epilogue of one token's 16-row tile at row0, by one whole warp: lane r < 16 adds `sum`
// (its row's product) into x[row0 + r]; with norm_out also bf16(x * w) and the tile's sum of x^2
// (gemv.cuh's kAccumulate; lanes 16..31 and rows past n_out add zeros).
__device__ inline void accumulate_tile(float *x, const hp_cuda_gemv::NormOut &norm_out, int row0, int n_out, float sum) {
    const int lane = threadIdx.x % 32, row = row0 + lane % kTileRows;
    const bool active = lane < kTileRows && row < n_out;
    const float x_new = active ? x[row] + sum : 0.0f;
    if (active) x[row] = x_new;
    if (!norm_out.h) return;
    if (active) norm_out.h[row] = __float2bfloat16_rn(x_new * hp_cuda_gemv::load_bias(norm_out.w_dtype, norm_out.w, row));
    float square = x_new * x_new;
    for (int offset = kTileRows / 2; offset > 0; offset /= 2) square += __shfl_xor_sync(0xffffffffu, square, offset);
    if (lane == 0) norm_out.sum_sq[row0 / kTileRows] = square;
}

// One d_ff row of a one-token gate/up, from each lane's partial sums of g and u: the warp's sums,
// scaled by 1/rms, and lane 0 hands bf16(weight * silu(g) * u) to `store`.
template <typename Store>
__device__ inline void silu_act_to(float g, float u, float inv_rms, float weight, Store store) {
    for (int offset = 16; offset > 0; offset /= 2) {
        g += __shfl_xor_sync(0xffffffffu, g, offset);
        u += __shfl_xor_sync(0xffffffffu, u, offset);
    }
    if (threadIdx.x % 32 == 0) {
        g *= inv_rms;
        u *= inv_rms;
        store(__float2bfloat16_rn(weight * (g / (1.0f + __expf(-g)) * u)));
    }
}
__device__ inline void store_silu_act(float g, float u, float inv_rms, float weight, __nv_bfloat16 *out) {
    silu_act_to(g, u, inv_rms, weight, [out](__nv_bfloat16 value) { *out = value; });
}

// One-token steps (knob moe_single_token): the token's k experts are all distinct and hit once, so
// down_proj is one GEMV over the concatenated act (k * d_ff inputs, grouped order) whose weight row
// is the experts' rows side by side: y[row] = sum_j W_down[active_expert[j]][row] . act[j]. Its
// accumulate epilogue adds y into the residual and, with norm_out, writes the next norm's operand
// and per-tile sums of x^2 exactly as gemv.cuh's kAccumulate (the next GEMV folds the norm), so the
// step needs no combine kernel. Grid (cluster, ceil(d_model / 16)); warps split the k * steps-per-
// expert input steps. Reads the routing before its wait, as the grouped down does.
struct SingleDownParams {
    const __nv_bfloat16 *const *w = nullptr;  // down table [n_expert] of bf16 [n_out][n_in]
    const __nv_bfloat16 *act = nullptr;       // bf16 [k][n_in], grouped order
    float *x = nullptr;                       // f32 [n_out] residual of the token
    hp_cuda_gemv::NormOut norm_out;           // optional
    const int32_t *n_active = nullptr, *active_expert = nullptr;
    const float *logits = nullptr;            // routed variant: f32 [n_expert] router logits (instead of the lists)
    int n_expert = 0, k = 0;
    int n_in = 0, n_out = 0;
};

// ROUTE_PER_LANE > 0 (moe_single_route): the kernel routes the token from p.logits itself instead
// of reading the lists. UNROLL: input steps of 32 per warp iteration (knob moe_single_down_unroll).
template <bool VEC, int ROUTE_PER_LANE = 0, int UNROLL = kUnroll>
__global__ void __launch_bounds__(kWarps * 32) expert_down_single_kernel(const SingleDownParams p) {
    __shared__ hp_cuda_gemv::WarpPartials<kWarps, 1, 1> partials;
    __shared__ const __nv_bfloat16 *expert_w_s[kMaxSingleExperts];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int n_split = gridDim.x * kWarps, split = blockIdx.x * kWarps + warp;
    const int row0 = blockIdx.y * kTileRows;
    const int n_in = p.n_in, n_chunk = (n_in + 7) / 8, n_step_e = (n_chunk + 3) / 4;
    int n_expert = 0;
    if constexpr (ROUTE_PER_LANE > 0) {  // the logits are complete: gate/up launches its dependents after its own wait
        __shared__ SingleRoute route_s;
        if (warp == 0) {
            route_single<ROUTE_PER_LANE>(p.logits, p.n_expert, p.k, 0, route_s);
            for (int j = lane; j < p.k; j += 32) expert_w_s[j] = p.w[route_s.expert[j]];
        }
        n_expert = p.k;
    } else {
        n_expert = *p.n_active;
        for (int j = threadIdx.x; j < n_expert; j += blockDim.x) expert_w_s[j] = p.w[p.active_expert[j]];
    }
    const int n_step = n_expert * n_step_e;
    __syncthreads();
    const int64_t row_lo = min(row0 + g, p.n_out - 1), row_hi = min(row0 + g + 8, p.n_out - 1);
    float acc[1][1][4] = {};
    bool waited = false;
    for (int s0 = split * UNROLL; s0 < n_step; s0 += n_split * UNROLL) {
        uint4 a[2][UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int step = min(s0 + u, n_step - 1), j = step / n_step_e;
            const int c = min((step - j * n_step_e) * 4 + q, n_chunk - 1);
            a[0][u] = hp_cuda_gemv::load_chunk<VEC, true>(expert_w_s[j] + row_lo * n_in, c, n_in);
            a[1][u] = hp_cuda_gemv::load_chunk<VEC, true>(expert_w_s[j] + row_hi * n_in, c, n_in);
        }
        if (!waited) {
            hp_cuda_gemv::wait_for_previous_grid();
            hp_cuda_gemv::launch_dependents();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (s0 + u >= n_step) break;
            const int j = (s0 + u) / n_step_e, c = (s0 + u - j * n_step_e) * 4 + q;
            const uint4 b = g == 0 && c < n_chunk ? hp_cuda_gemv::load_chunk<VEC, false>(p.act + int64_t(j) * n_in, c, n_in) : make_uint4(0, 0, 0, 0);
            hp_cuda_gemv::mma_16816(acc[0][0], a[0][u].x, a[1][u].x, a[0][u].y, a[1][u].y, b.x, b.y);
            hp_cuda_gemv::mma_16816(acc[0][0], a[0][u].z, a[1][u].z, a[0][u].w, a[1][u].w, b.z, b.w);
        }
    }
    if (!waited) {
        hp_cuda_gemv::wait_for_previous_grid();
        hp_cuda_gemv::launch_dependents();
    }
    partials.add(acc);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    if (blockIdx.x == 0 && threadIdx.x < 32) {  // token 0's 16 rows: lanes 0..15 (16..31 add zeros to the shuffles)
        float sum = partials.block_sum[0][lane % kTileRows];
        for (unsigned rank = 1; rank < gridDim.x; ++rank) sum += cluster.map_shared_rank(&partials.block_sum[0][0], rank)[lane % kTileRows];
        accumulate_tile(p.x, p.norm_out, row0, p.n_out, sum);
    }
    cluster.sync();
}

// One-token gate/up with moe_single_route: one warp per row of d_ff (as the first, per-(token, slot)
// kernel of kernels.cuh, which streamed the same bytes faster at one token than the clustered
// tensor-core GEMV: 6144 independent warps, no reduction across blocks), fed by the block's own
// routing. Grid (ceil(n_out / kSingleWarps), k): block (x, a) takes rows x * kSingleWarps.. of the
// a-th chosen expert in grouped order and writes act[a][row] = bf16(weight * silu(g) * u), g and u
// scaled by 1/rms of the folded norm. Each lane keeps kSingleUnroll 16-byte loads of gate and of up
// in flight per iteration (n_in = 2048: one iteration). Block (0, 0) also writes the routing
// (expert_index, expert_weight, the one-token lists, inv_rms, expert_counts) for whoever reads it.
struct SingleGateUpParams {
    const float *logits = nullptr;            // f32 [n_expert] router logits of the token
    int n_expert = 0, k = 0, norm_topk_prob = 0;
    const float *x_sum_sq = nullptr;          // optional: f32 [n_sum_sq] partial sums of x^2 (folded norm)
    int n_sum_sq = 0;
    float norm_eps = 0.0f;
    int32_t *expert_counts = nullptr;         // optional [n_expert], += picks
    Routing routing;
    const __nv_bfloat16 *const *gate = nullptr, *const *up = nullptr;  // device tables [n_expert] of bf16 [n_out][n_in]
    const __nv_bfloat16 *x = nullptr;         // bf16 [n_in]
    __nv_bfloat16 *act = nullptr;             // bf16 [k][n_out], grouped order
    int n_in = 0, n_out = 0;
};

constexpr int kSingleWarps = HP_CUDA_MOE_SINGLE_WARPS;
constexpr int kSingleUnroll = HP_CUDA_MOE_SINGLE_UNROLL;

template <int PER_LANE, bool VEC>
__global__ void __launch_bounds__(kSingleWarps * 32) expert_gate_up_single_kernel(const SingleGateUpParams p) {
    __shared__ SingleRoute route_s;
    __shared__ float inv_rms_s;
    hp_cuda_gemv::wait_for_previous_grid();  // the router logits and the folded norm's partial sums
    hp_cuda_gemv::launch_dependents();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (warp == 0) route_single<PER_LANE>(p.logits, p.n_expert, p.k, p.norm_topk_prob, route_s);
    if (warp == kSingleWarps - 1) {
        const float inv_rms = p.x_sum_sq ? hp_cuda_gemv::warp_inv_rms(p.x_sum_sq, p.n_sum_sq, p.n_in, p.norm_eps) : 1.0f;
        if (lane == 0) inv_rms_s = inv_rms;
    }
    __syncthreads();
    if (blockIdx.x == 0 && blockIdx.y == 0 && warp == 0) write_single_routing(route_s, p.k, p.routing, p.expert_counts, p.x_sum_sq != nullptr, inv_rms_s);
    const int a = blockIdx.y, row = blockIdx.x * kSingleWarps + warp;
    if (row >= p.n_out) return;
    const int expert = route_s.expert[a], n_in = p.n_in, n_chunk = (n_in + 7) / 8;
    const __nv_bfloat16 *gate_row = p.gate[expert] + int64_t(row) * n_in, *up_row = p.up[expert] + int64_t(row) * n_in;
    float gate = 0.0f, up = 0.0f;
    for (int c0 = lane; c0 < n_chunk; c0 += 32 * kSingleUnroll) {
        uint4 wg[kSingleUnroll], wu[kSingleUnroll];
#pragma unroll
        for (int u = 0; u < kSingleUnroll; ++u) {
            const int c = c0 + 32 * u;
            wg[u] = c < n_chunk ? hp_cuda_gemv::load_chunk<VEC, true>(gate_row, c, n_in) : make_uint4(0, 0, 0, 0);
            wu[u] = c < n_chunk ? hp_cuda_gemv::load_chunk<VEC, true>(up_row, c, n_in) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kSingleUnroll; ++u) {
            const int c = c0 + 32 * u;
            if (c >= n_chunk) break;
            const uint4 xv = hp_cuda_gemv::load_chunk<VEC, false>(p.x, c, n_in);
            gate = hp_cuda_gemv::dot_chunk(gate, wg[u], xv);
            up = hp_cuda_gemv::dot_chunk(up, wu[u], xv);
        }
    }
    store_silu_act(gate, up, inv_rms_s, route_s.weight[a], p.act + int64_t(a) * p.n_out + row);
}

// Blocks of `kernel` resident at once on the device (occupancy x SMs), asked once per kernel.
inline int64_t wave_blocks(const void *kernel) {
    static const void *known[32];
    static int64_t blocks[32];
    for (int i = 0; i < 32 && known[i]; ++i) {
        if (known[i] == kernel) return blocks[i];
    }
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, 0);
    const int64_t wave = int64_t(std::max(per_sm, 1)) * hp_cuda_gemv::device_sm_count();
    for (int i = 0; i < 32; ++i) {
        if (!known[i]) {
            known[i] = kernel;
            blocks[i] = wave;
            break;
        }
    }
    return wave;
}

// Blocks per cluster: the fewest (a power of two up to HP_CUDA_MOE_MAX_CLUSTER) that give at least
// HP_CUDA_MOE_TARGET_WARPS warps over all tiles of the slots, without leaving a warp less than one
// full iteration of the input loop, and (HP_CUDA_MOE_ONE_WAVE) without a grid larger than one wave
// of resident blocks (`wave`): a second, partial wave costs a whole extra round of memory latency.
inline int cluster_size(int64_t tiles, int n_in, int64_t wave, int unroll = kUnroll) {
    const int n_step = ((n_in + 7) / 8 + 3) / 4;
    int size = 1;
    while (size < HP_CUDA_MOE_MAX_CLUSTER && tiles * size * kWarps < HP_CUDA_MOE_TARGET_WARPS && 2 * size * kWarps * unroll <= n_step &&
           (!HP_CUDA_MOE_ONE_WAVE || tiles * size * 2 <= wave)) {
        size *= 2;
    }
    return size;
}

template <int NB, int EPI>
void launch_expert_tokens(const ExpertParams &p, int tiles, int slots, bool vec, cudaStream_t stream) {
    void (*kernel)(ExpertParams) = vec ? expert_gemv_kernel<NB, EPI, true> : expert_gemv_kernel<NB, EPI, false>;
    const dim3 grid(unsigned(cluster_size(int64_t(tiles) * slots, p.n_in, wave_blocks(reinterpret_cast<const void *>(kernel)))),
                    unsigned(tiles), unsigned(slots));
    hp_cuda_gemv::launch_pdl_clustered(kernel, grid, dim3(kWarps * 32), 0, grid.x, stream, p);
}

// One expert GEMV launch for a step of n_token tokens (EPI: kSiluMul gate/up, kStore down).
// `vec`: every expert matrix 16-byte aligned, n_in % 8 == 0 and x aligned (the caller knows the tables).
template <int EPI>
void launch_experts(const ExpertParams &p, int n_expert, bool vec, cudaStream_t stream) {
    if (p.n_token <= 0) return;
    const int slots = std::min(n_expert, p.n_token * p.k);
    const int tiles = (p.n_out + kTileRows - 1) / kTileRows / p.tiles_per_block + ((p.n_out + kTileRows - 1) / kTileRows % p.tiles_per_block != 0);
    vec = vec && p.n_in % 8 == 0 && hp_cuda_gemv::aligned16(p.x);
    const int nb = hp_cuda_gemv::token_tiles(p.n_token);
    switch (nb) {
        case 1: launch_expert_tokens<1, EPI>(p, tiles, slots, vec, stream); break;
        case 2: launch_expert_tokens<2, EPI>(p, tiles, slots, vec, stream); break;
        case 4: launch_expert_tokens<4, EPI>(p, tiles, slots, vec, stream); break;
        default: launch_expert_tokens<8, EPI>(p, tiles, slots, vec, stream); break;
    }
}

// x[t] += sum_slot out[t * k + slot] (routing weights already folded in), in slot order, (+
// sigmoid(shared_logit[t]) * shared[t]); with norm_w also h[t] = bf16(x[t] / rms(x[t]) * norm_w).
// One block per token.
__global__ void __launch_bounds__(256) moe_combine_norm_kernel(float *x, const float *out, int k, const float *shared, const float *shared_logit,
                                                          int d_model, const void *norm_w, hp_dtype norm_dtype, float norm_eps,
                                                          __nv_bfloat16 *h) {
    __shared__ float partial_s[8];
    hp_cuda_gemv::launch_dependents();
    hp_cuda_gemv::wait_for_previous_grid();
    const int t = blockIdx.x;
    const float shared_weight = shared ? 1.0f / (1.0f + __expf(-shared_logit[t])) : 0.0f;
    float *row = x + int64_t(t) * d_model;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) {
        float sum = 0.0f;
        for (int slot = 0; slot < k; ++slot) sum += out[(int64_t(t) * k + slot) * d_model + i];
        if (shared) sum += shared_weight * shared[int64_t(t) * d_model + i];
        const float value = row[i] + sum;
        row[i] = value;
        sum_sq += value * value;
    }
    if (!norm_w) return;
    for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    if (threadIdx.x % 32 == 0) partial_s[threadIdx.x / 32] = sum_sq;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += partial_s[w];
    const float scale = rsqrtf(total / float(d_model) + norm_eps);
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) {
        h[int64_t(t) * d_model + i] = __float2bfloat16_rn(row[i] * scale * hp_cuda_gemv::load_bias(norm_dtype, norm_w, i));
    }
}

// The device side of one MoE FFN after the router logits: routing and grouping, gate/up, down,
// combine into x (and the next norm's operand when `next_norm_w`). Shared-expert results, when
// given, are added by the combine. Buffers: act bf16 [n_token * k][d_ff], out f32 [n_token * k][d_model].
struct MoeStep {
    RouteParams route;                  // logits, n_token, n_expert, k, norm_topk_prob, folded-norm sums, counts, routing
    const __nv_bfloat16 *const *gate = nullptr, *const *up = nullptr, *const *down = nullptr;  // device tables [n_expert]
    bool vec = false;                   // every expert matrix 16-byte aligned
    const __nv_bfloat16 *h = nullptr;   // bf16 [n_token][d_model]: the FFN input (bf16(x * norm_w) when folded)
    int d_model = 0, d_ff = 0;
    __nv_bfloat16 *act = nullptr;
    float *out = nullptr;
    float *x = nullptr;                 // f32 residual [n_token][d_model]
    const float *shared = nullptr, *shared_logit = nullptr;
    int down_tiles = 1;                 // grouped down: 16-row tiles per block (the plugin: knobs moe_down_tiles, moe_down_tiles_min_tokens)
    bool single_token = false;          // n_token == 1, no shared expert: expert_down_single_kernel accumulates into x (no combine)
    bool single_route = HP_CUDA_MOE_SINGLE_ROUTE;  // single_token: no routing kernel; the gate/up and down kernels route (moe_single_route)
    hp_cuda_gemv::NormOut norm_out;     // single_token, optional: the next norm's operand and tile sums (gemv.cuh)
    const void *next_norm_w = nullptr;  // combine, optional: write h = bf16(RMSNorm(x) * next_norm_w)
    hp_dtype next_norm_dtype = HP_DTYPE_F32;
    float norm_eps = 0.0f;
    __nv_bfloat16 *h_out = nullptr;
};

// One-token step with moe_single_route: expert_gate_up_single_kernel (routes, writes the routing),
// then expert_down_single_kernel routing from the logits itself (before it waits for gate/up).
inline void moe_single_routed(const MoeStep &s, int per_lane, cudaStream_t stream) {
    SingleGateUpParams g;
    g.logits = s.route.logits;
    g.n_expert = s.route.n_expert;
    g.k = s.route.k;
    g.norm_topk_prob = s.route.norm_topk_prob;
    g.x_sum_sq = s.route.x_sum_sq;
    g.n_sum_sq = s.route.n_sum_sq;
    g.norm_eps = s.route.norm_eps;
    g.expert_counts = s.route.expert_counts;
    g.routing = s.route.routing;
    g.gate = s.gate;
    g.up = s.up;
    g.x = s.h;
    g.act = s.act;
    g.n_in = s.d_model;
    g.n_out = s.d_ff;
    const bool vec_in = s.vec && s.d_model % 8 == 0 && hp_cuda_gemv::aligned16(s.h);
    auto gate_up = [&](auto per) {
        constexpr int P = decltype(per)::value;
        hp_cuda_gemv::launch_pdl(vec_in ? expert_gate_up_single_kernel<P, true> : expert_gate_up_single_kernel<P, false>,
                                 dim3(unsigned((s.d_ff + kSingleWarps - 1) / kSingleWarps), unsigned(s.route.k)), dim3(kSingleWarps * 32), 0,
                                 stream, g);
    };
    SingleDownParams d;
    d.w = s.down;
    d.act = s.act;
    d.x = s.x;
    d.norm_out = s.norm_out;
    d.logits = s.route.logits;
    d.n_expert = s.route.n_expert;
    d.k = s.route.k;
    d.n_in = s.d_ff;
    d.n_out = s.d_model;
    const int tiles = (s.d_model + kTileRows - 1) / kTileRows;
    const bool vec_down = s.vec && s.d_ff % 8 == 0 && hp_cuda_gemv::aligned16(s.act);
    constexpr int kDownUnroll = HP_CUDA_MOE_SINGLE_DOWN_UNROLL;
    auto down = [&](auto per) {
        constexpr int P = decltype(per)::value;
        void (*kernel)(SingleDownParams) = vec_down ? expert_down_single_kernel<true, P, kDownUnroll> : expert_down_single_kernel<false, P, kDownUnroll>;
        const dim3 grid(unsigned(cluster_size(tiles, s.route.k * s.d_ff, wave_blocks(reinterpret_cast<const void *>(kernel)), kDownUnroll)),
                        unsigned(tiles));
        hp_cuda_gemv::launch_pdl_clustered(kernel, grid, dim3(kWarps * 32), 0, grid.x, stream, d);
    };
    auto both = [&](auto per) {
        gate_up(per);
        down(per);
    };
    if (per_lane <= 1) both(std::integral_constant<int, 1>{});
    else if (per_lane <= 2) both(std::integral_constant<int, 2>{});
    else if (per_lane <= 4) both(std::integral_constant<int, 4>{});
    else if (per_lane <= 8) both(std::integral_constant<int, 8>{});
    else both(std::integral_constant<int, kMaxExpert / 32>{});
}

// route -> gate/up -> down on `stream` (the combine is separate: a shared expert may run between;
// single_token steps need none).
inline void moe_experts(const MoeStep &s, cudaStream_t stream) {
    const int n_token = s.route.n_token;
    if (n_token <= 0) return;
    const int per_lane = (s.route.n_expert + 31) / 32;
    if (s.single_token && s.single_route) {
        moe_single_routed(s, per_lane, stream);
        return;
    }
    auto route = per_lane <= 1 ? route_group_kernel<1> : per_lane <= 2 ? route_group_kernel<2> : per_lane <= 4 ? route_group_kernel<4>
               : per_lane <= 8 ? route_group_kernel<8> : route_group_kernel<kMaxExpert / 32>;
    hp_cuda_gemv::launch_pdl(route, dim3(1), dim3(kRouteThreads), 0, stream, s.route);
    ExpertParams p;
    p.routing = s.route.routing;
    p.k = s.route.k;
    p.n_token = n_token;
    p.w = s.gate;
    p.w2 = s.up;
    p.x = s.h;
    p.inv_rms = s.route.x_sum_sq ? s.route.routing.inv_rms : nullptr;
    p.y = s.act;
    p.n_in = s.d_model;
    p.n_out = s.d_ff;
    launch_experts<hp_cuda_gemv::kSiluMul>(p, s.route.n_expert, s.vec, stream);
    if (s.single_token) {
        SingleDownParams d;
        d.w = s.down;
        d.act = s.act;
        d.x = s.x;
        d.norm_out = s.norm_out;
        d.n_active = s.route.routing.n_active;
        d.active_expert = s.route.routing.active_expert;
        d.n_in = s.d_ff;
        d.n_out = s.d_model;
        const int tiles = (s.d_model + kTileRows - 1) / kTileRows;
        const bool vec = s.vec && s.d_ff % 8 == 0 && hp_cuda_gemv::aligned16(s.act);
        constexpr int kDownUnroll = HP_CUDA_MOE_SINGLE_DOWN_UNROLL;
        void (*kernel)(SingleDownParams) = vec ? expert_down_single_kernel<true, 0, kDownUnroll> : expert_down_single_kernel<false, 0, kDownUnroll>;
        const dim3 grid(unsigned(cluster_size(tiles, s.route.k * s.d_ff, wave_blocks(reinterpret_cast<const void *>(kernel)), kDownUnroll)),
                        unsigned(tiles));
        hp_cuda_gemv::launch_pdl_clustered(kernel, grid, dim3(kWarps * 32), 0, grid.x, stream, d);
        return;
    }
    p.w = s.down;
    p.w2 = nullptr;
    p.x = s.act;
    p.inv_rms = nullptr;
    p.y = s.out;
    p.n_in = s.d_ff;
    p.n_out = s.d_model;
    p.tiles_per_block = s.down_tiles;
    launch_experts<hp_cuda_gemv::kStore>(p, s.route.n_expert, s.vec, stream);
}

inline void moe_combine(const MoeStep &s, cudaStream_t stream) {
    if (s.route.n_token <= 0) return;
    hp_cuda_gemv::launch_pdl(moe_combine_norm_kernel, dim3(s.route.n_token), dim3(256), 0, stream, s.x, static_cast<const float *>(s.out),
                             s.route.k, s.shared, s.shared_logit, s.d_model, s.next_norm_w, s.next_norm_dtype, s.norm_eps, s.h_out);
}

}  // namespace hp_cuda_moe
