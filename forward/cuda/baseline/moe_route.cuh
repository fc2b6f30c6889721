// Routing of the CUDA baseline's grouped MoE decode (moe.cuh): the router logits of each token
// become its top-k experts and routing weights, and the step's (token, slot) pairs per-expert lists.
//
//   route_group_kernel   one block: per token (one warp) softmax over the router logits, top-k
//                        (ties to the lower index), optional renormalisation; then per expert the
//                        number of (token, slot) pairs that chose it, an exclusive scan, and the
//                        pairs scattered into per-expert lists: n_active, active_expert[a],
//                        group_start[a] (a in 0..n_active, sorted by expert id), group_pair[pos]
//                        = token * k + slot. With the folded RMSNorm it also sums each token's
//                        x^2 partials into inv_rms[token].
//   route_single         one-token steps with knob moe_single_route: one warp of an expert kernel
//                        picks the token's k experts itself (no routing kernel).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gemv.cuh"
#include "knobs.h"

namespace hp_cuda_moe {

constexpr int kRouteThreads = HP_CUDA_MOE_ROUTE_THREADS;
constexpr int kMaxExpert = 512;               // experts the routing block holds in shared memory
constexpr int kPickCapacity = 2048;           // (token, slot) picks the routing block keeps in shared memory
constexpr int kMaxSingleExperts = 64;         // top-k of the one-token kernels

// Where the routing of one step lives (device buffers sized for the workspace's tokens).
struct Routing {
    int32_t *expert_index = nullptr;  // [n_token * k]
    float *expert_weight = nullptr;   // [n_token * k] (renormalised when norm_topk_prob)
    int32_t *n_active = nullptr;      // [1]: experts chosen by at least one token
    int32_t *active_expert = nullptr; // [n_expert]: their ids, ascending
    int32_t *group_start = nullptr;   // [n_expert + 1]: first grouped position of active expert a; [n_active] = n_token * k
    int32_t *group_pair = nullptr;    // [n_token * k]: grouped position -> token * k + slot
    float *inv_rms = nullptr;         // [n_token]: 1 / rms of the FFN input when the norm is folded
};

struct RouteParams {
    const float *logits = nullptr;     // f32 [n_token][n_expert]
    int n_token = 0, n_expert = 0, k = 0, norm_topk_prob = 0;
    const float *x_sum_sq = nullptr;   // optional: f32 [n_token][n_sum_sq] partial sums of x^2 (folded norm)
    int n_sum_sq = 0, d_model = 0;
    float norm_eps = 0.0f;
    int32_t *expert_counts = nullptr;  // optional [n_expert], += picks
    Routing routing;
};

// One token's routing by one warp: softmax over the router logits `row` (probabilities held
// PER_LANE per lane, 32 * PER_LANE >= n_expert), then k arg-max rounds (ties to the lower index, as
// torch.topk). Lane 0 calls pick(slot, expert, probability) per slot, in slot order; returns the sum
// of the chosen probabilities (every lane).
// Precondition: 1 <= k <= n_expert (baseline_create refuses other configs).
// A round is two warp reductions in hardware (redux.sync): the largest key, then the lowest expert
// holding it. A probability's key is its bit pattern, which orders non-negative floats as their
// values (a -inf logit's probability is +0 and keys 0; -0 cannot occur); a NaN probability keys -1,
// below every number; experts past n_expert and those taken key INT_MIN, never picked. So every
// pick is a distinct expert below n_expert whatever the logits. A NaN or +inf logit, or logits all
// -inf, make every probability NaN (the softmax's total is NaN), so the picks are experts 0..k-1
// with NaN weights, which the verifier then rejects.
template <int PER_LANE, typename Pick>
__device__ inline float route_token(const float *row, int n_expert, int k, Pick &&pick) {
    const int lane = threadIdx.x % 32;
    float prob[PER_LANE];
    float max_logit = -INFINITY;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int e = lane + 32 * j;
        prob[j] = e < n_expert ? row[e] : -INFINITY;
        max_logit = fmaxf(max_logit, prob[j]);
    }
    for (int offset = 16; offset > 0; offset /= 2) max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        prob[j] = lane + 32 * j < n_expert ? expf(prob[j] - max_logit) : 0.0f;
        total += prob[j];
    }
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
    constexpr int kGone = INT_MIN;  // past n_expert, or taken
    int key[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const float p = prob[j] / total;
        key[j] = lane + 32 * j >= n_expert ? kGone : p >= 0.0f ? __float_as_int(p) : -1;
    }
    float chosen_total = 0.0f;
    for (int slot = 0; slot < k; ++slot) {
        int lane_key = kGone, lane_e = 0;  // this lane's best: its first (lowest) expert of the largest key
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            if (key[j] > lane_key) {
                lane_key = key[j];
                lane_e = lane + 32 * j;
            }
        }
        const int best = __reduce_max_sync(0xffffffffu, lane_key);
        const int best_e = int(__reduce_min_sync(0xffffffffu, lane_key == best && best != kGone ? unsigned(lane_e) : 0xffffffffu));
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            if (lane + 32 * j == best_e) key[j] = kGone;
        }
        const float chosen = best >= 0 ? __int_as_float(best) : NAN;
        chosen_total += chosen;
        if (lane == 0) pick(slot, best_e, chosen);
    }
    return chosen_total;
}

// PER_LANE: router probabilities per lane (32 * PER_LANE >= n_expert).
template <int PER_LANE>
__global__ void __launch_bounds__(kRouteThreads) route_group_kernel(const RouteParams p) {
    __shared__ int count_s[kMaxExpert], start_s[kMaxExpert], fill_s[kMaxExpert];
    __shared__ int pick_s[kPickCapacity];      // expert of each (token, slot) when n_token * k fits
    __shared__ float weight_s[kPickCapacity];  // its probability, before renormalisation
    hp_cuda_gemv::launch_dependents();
    hp_cuda_gemv::wait_for_previous_grid();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warp = blockDim.x / 32;
    const int n_expert = p.n_expert, k = p.k;
    const Routing &r = p.routing;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) count_s[e] = fill_s[e] = 0;
    __syncthreads();
    for (int t = warp; t < p.n_token; t += n_warp) {
        const float chosen_total = route_token<PER_LANE>(p.logits + int64_t(t) * n_expert, n_expert, k, [&](int slot, int best_e, float best) {
            const int pair = t * k + slot;
            r.expert_index[pair] = best_e;
            if (pair < kPickCapacity) {
                pick_s[pair] = best_e;
                weight_s[pair] = best;
            } else {
                r.expert_weight[pair] = best;
            }
            atomicAdd(&count_s[best_e], 1);
            if (p.expert_counts) atomicAdd(p.expert_counts + best_e, 1);
        });
        __syncwarp();  // lane 0's picks are visible to the warp
        for (int slot = lane; slot < k; slot += 32) {
            const int pair = t * k + slot;
            const float weight = pair < kPickCapacity ? weight_s[pair] : r.expert_weight[pair];
            r.expert_weight[pair] = p.norm_topk_prob ? weight / chosen_total : weight;
        }
        if (p.x_sum_sq) {
            const float inv_rms = hp_cuda_gemv::warp_inv_rms(p.x_sum_sq + int64_t(t) * p.n_sum_sq, p.n_sum_sq, p.d_model, p.norm_eps);
            if (lane == 0) r.inv_rms[t] = inv_rms;
        }
    }
    __syncthreads();  // counts complete; expert_index visible to the block
    if (warp == 0) {  // exclusive scan of the counts and the compact list of active experts, 32 experts at a time
        int position = 0, active = 0;
        for (int base = 0; base < n_expert; base += 32) {
            const int e = base + lane;
            const int count = e < n_expert ? count_s[e] : 0, flag = count > 0;
            int count_incl = count, flag_incl = flag;
            for (int offset = 1; offset < 32; offset *= 2) {
                const int c = __shfl_up_sync(0xffffffffu, count_incl, offset), f = __shfl_up_sync(0xffffffffu, flag_incl, offset);
                if (lane >= offset) count_incl += c, flag_incl += f;
            }
            const int start = position + count_incl - count;
            if (e < n_expert) start_s[e] = start;
            if (flag) {
                r.active_expert[active + flag_incl - 1] = e;
                r.group_start[active + flag_incl - 1] = start;
            }
            position += __shfl_sync(0xffffffffu, count_incl, 31);
            active += __shfl_sync(0xffffffffu, flag_incl, 31);
        }
        if (lane == 0) {
            *r.n_active = active;
            r.group_start[active] = position;
        }
    }
    __syncthreads();
    for (int pair = threadIdx.x; pair < p.n_token * k; pair += blockDim.x) {
        const int e = pair < kPickCapacity ? pick_s[pair] : r.expert_index[pair];
        r.group_pair[start_s[e] + atomicAdd(&fill_s[e], 1)] = pair;
    }
}

// One-token steps with knob moe_single_route: the expert kernels route the token themselves from the
// router logits (no routing kernel). Warp 0 of a block picks the k experts (route_token: every block
// computes the same picks with the same arithmetic) and orders them by expert id, the grouped order
// of route_group_kernel: expert[a], slot[a], weight[a] for a in 0..k.
struct SingleRoute {
    int pick_expert[kMaxSingleExperts];
    float pick_weight[kMaxSingleExperts];  // by slot, before renormalisation
    int expert[kMaxSingleExperts], slot[kMaxSingleExperts];
    float weight[kMaxSingleExperts];       // by grouped position, renormalised when norm_topk_prob
};

// Called by one whole warp; `route` in shared memory, valid to that warp on return.
template <int PER_LANE>
__device__ inline void route_single(const float *logits, int n_expert, int k, int norm_topk_prob, SingleRoute &route) {
    const int lane = threadIdx.x % 32;
    const float total = route_token<PER_LANE>(logits, n_expert, k, [&](int slot, int e, float prob) {
        route.pick_expert[slot] = e;
        route.pick_weight[slot] = prob;
    });
    __syncwarp();
    for (int slot = lane; slot < k; slot += 32) {
        const int e = route.pick_expert[slot];
        int rank = 0;
        for (int j = 0; j < k; ++j) rank += route.pick_expert[j] < e;  // the k picks are distinct
        route.expert[rank] = e;
        route.slot[rank] = slot;
        route.weight[rank] = norm_topk_prob ? route.pick_weight[slot] / total : route.pick_weight[slot];
    }
    __syncwarp();
}

}  // namespace hp_cuda_moe
