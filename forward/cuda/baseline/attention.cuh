// Flash-decoding paged attention of the CUDA baseline (knob attn_kernel = 1): the KV stream at
// near copy bandwidth for decode steps of any batch, with the split reduction fused into the last
// block of each (token, kv head).
//
// Grid (kv head g, token t, split s), HP_CUDA_ATTN_FD_WARPS warps per block. A K or V row of one kv
// head (d_head 16-bit elements) is read by d_head / 8 lanes with one 16-byte load each, so a warp
// load covers 32 / (d_head / 8) consecutive positions (4 at d_head 64) and a warp step takes
// HP_CUDA_ATTN_FD_UNROLL such loads of K and as many of V in flight per lane (16 positions at the
// defaults: one 16-token paged block, 4 KB of KV per warp step). Every query head of g's GQA group
// is scored against each K load (q held in registers, pre-scaled by scale * log2(e)), so K and V
// are read once per group (attention_step.cuh: with knob attn_fd_scatter_scores, default 2, each
// lane sums and updates only its share of the heads). Softmax is online per warp in base 2 with a
// running max uniform over the warp's rows;
// the warps of a block are combined through shared memory, then either the bf16 output is written
// (one split) or the split's (max, sum, unnormalised acc) goes to `partial` and the last block of
// the (token, kv head) to arrive (atomic counter) adds the splits in split order (deterministic
// whatever the arrival order) and writes the output, and sets the counter back to zero for the
// next step (graph replays need no reset). With knob attn_fd_cluster the splits of a (token, kv
// head) run as one thread-block cluster instead (grid (split, kv head, token)): each block writes its
// split's state into the other blocks' shared memory (distributed shared memory), and after one
// cluster barrier every block adds the splits, in split order, for its share of the outputs (the
// same sums, no trip through L2 and no counter). Positions [0, positions[t]] of the token's sequence are
// attended (the head kernel, or the q/k/v launch's head epilogue, has written position positions[t]
// before, or with knob attn_fd_head this kernel writes it first; older rows may be loaded before
// griddepcontrol.wait: knob attn_fd_early_kv). 16-bit KV (bf16, f16),
// d_head 32, 64 or 128, group <= kMaxGroup; other shapes use attention_split_kernel.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include <hotpass/forward_abi.h>

#include "attention_head.cuh"
#include "attention_oproj.cuh"
#include "attention_step.cuh"
#include "gemv.cuh"
#include "knobs.h"

namespace hp_cuda_baseline {

constexpr int kFdWarps = HP_CUDA_ATTN_FD_WARPS;
// Warps of the CUDA-core flash-decoding block in steps of at most HP_CUDA_ATTN_FD_SMALL_MAX_TOKENS
// tokens: twice the warps halve the splits of a latency-bound launch (one round of the last block's
// reduction instead of several), the kernel's other template arguments unchanged.
constexpr int kFdSmallWarps = HP_CUDA_ATTN_FD_SMALL_WARPS;
// Minimum blocks per SM (__launch_bounds__) of the non-prefetching kernel in blocks of W warps:
// attn_fd_min_blocks blocks of attn_fd_warps warps, i.e. the same warps per SM and so the same
// register cap whatever W (blocks of attn_fd_small_warps 8 at 4 blocks would cap at 64 registers
// and spill ~600 bytes a thread: ptxas -v).
__host__ __device__ constexpr int fd_min_blocks(int w) {
    const int blocks = HP_CUDA_ATTN_FD_MIN_BLOCKS * kFdWarps / w;
    return blocks < 1 ? 1 : blocks;
}
constexpr int kFdMaxSplit = 64;  // splits per (token, kv head): the last block's weights in shared memory
constexpr int kFdMaxCluster = 16;  // splits of one cluster (knob attn_fd_cluster; above 8: a non-portable cluster size)

// Whether a launch of n_split splits runs them as one cluster (knob attn_fd_cluster: the largest
// cluster it may form; 0 never).
inline bool fd_cluster(int n_split) { return HP_CUDA_ATTN_FD_CLUSTER >= 2 && n_split >= 2 && n_split <= HP_CUDA_ATTN_FD_CLUSTER; }

struct DecodeAttentionParams {
    int n_head, n_head_kv, group;
    float scale_log2;            // 1 / sqrt(d_head) * log2(e)
    int block_tokens, block_shift;  // block_shift: log2(block_tokens) when a power of two, else -1
    int max_blocks;
    int n_split;                 // splits per (token, kv head); 1: no partials, no counters
    const int32_t *seq_token_start;  // the batch's [n_seq + 1] where n_seq == n_token, else null (early KV: no token is alone)
    hp_cuda_gemv::L2Prefetch prefetch;  // upcoming weights, prefetched into L2 before the wait (gemv.cuh)
    unsigned long long *trace = nullptr;  // HP_CUDA_ATTN_TRACE builds, optional: [block][kFdTracePoints] global timer (ns)
    int head_split = 1;  // CUDA-core kernel (knob attn_fd_head_split): blocks per (token, kv head, split), each group / head_split query heads
    FdHead head;         // CUDA-core kernel (knob attn_fd_head): the head kernel's work in the prologue (a decode step, head_split 1), else head.k null
    FdOProj oproj;       // CUDA-core kernel's OPROJ variant (knob attn_fd_oproj): o_proj in the blocks (attention_oproj.cuh)
};

// The blocks of grid row y (the grid's kv-head coordinate): kv head y / head_split, and
// group / head_split of its query heads from head0 (knob attn_fd_head_split; 1: the whole group).
// The divisions are compiled in only with the knob above 1 (head_split is then 1 or the knob): the
// default plugin built with them measured 0.5% slower at qwen3-30b-a3b batch 1 (H100), and they were
// the likely cause (the other edits of that build leave the default's code as it was).
constexpr bool kFdHeadSplit = HP_CUDA_ATTN_FD_HEAD_SPLIT > 1;
__device__ inline int fd_head_split(const DecodeAttentionParams &p) { return kFdHeadSplit ? p.head_split : 1; }
__device__ inline int fd_block_group(const DecodeAttentionParams &p) { return kFdHeadSplit ? p.group / p.head_split : p.group; }
__device__ inline int fd_block_kv_head(const DecodeAttentionParams &p, int y) { return kFdHeadSplit ? y / p.head_split : y; }
__device__ inline int fd_block_head0(const DecodeAttentionParams &p, int y) {
    return kFdHeadSplit ? y / p.head_split * p.group + y % p.head_split * fd_block_group(p) : y * p.group;
}

// HP_CUDA_ATTN_TRACE: per block (thread 0), when it starts, passes griddepcontrol.wait, ends its
// warp's steps, has every warp's state in shared memory, has combined its warps (the split's
// partial written), passes the cluster barrier (clusters only), and ends.
constexpr int kFdTracePoints = 7;
constexpr int kFdTraceBlocks = 1024;  // blocks a traced launch records (the first, in linear order)
__device__ inline void fd_trace(const DecodeAttentionParams &p, int point) {
    if constexpr (HP_CUDA_ATTN_TRACE) {
        const unsigned block = hp_cuda_gemv::linear_block();
        if (p.trace && threadIdx.x == 0 && block < unsigned(kFdTraceBlocks)) p.trace[block * kFdTracePoints + point] = hp_cuda_gemv::global_timer();
    }
}

// Dynamic shared memory of a decode_attention_kernel launch of W warps: the ring of its variant
// without PREFETCH (knob attn_fd_ring >= 2: RING steps of 2 * kFdUnroll 16-byte chunks per thread),
// else none.
template <bool PREFETCH, int W, int RING = HP_CUDA_ATTN_FD_RING>
__host__ __device__ constexpr size_t fd_ring_bytes() {
    return !PREFETCH && RING >= 2 ? size_t(RING) * W * 32 * 2 * kFdUnroll * 16 : 0;
}

// The dynamic shared memory a launch of `kernel` (a decode_attention_kernel<.., PREFETCH, W, .., RING>)
// takes, with the kernel allowed that much beside its static shared memory (above 48 KB together a
// launch fails without the attribute); host code, before every launch of a variant without PREFETCH.
template <bool PREFETCH, int W, int RING = HP_CUDA_ATTN_FD_RING, typename... Params>
inline size_t fd_prepare_shared(void (*kernel)(Params...)) {
    constexpr size_t bytes = fd_ring_bytes<PREFETCH, W, RING>();
    if (bytes > 0) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    return bytes;
}

// Positions covered by one warp step: 32 / (d_head / 8) per load, kFdUnroll loads.
constexpr int fd_step_positions(int d_head) { return 32 / (d_head / 8) * kFdUnroll; }

// KV rows are read once per step: keep them out of L1 (plain coherent loads: the head kernel of
// this step, or with attn_fd_head this kernel's own warp, wrote the newest row).
__device__ inline uint4 load_kv(const void *ptr) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
    return v;
}

// Shared memory of one flash-decoding block: each warp's online-softmax state per query head of the
// group (m: running max, base 2; l: sum; acc: unnormalised output), and the split weights of the
// last block.
template <int D, int G, int W = kFdWarps>
struct FdShared {
    float m[W][G], l[W][G];
    float acc[W][G][D];
    float weight[kFdMaxSplit][G];
    float total[G];  // the last block's sum over splits of weight * l, per head
    float head_m[G], head_l[G];  // fd_block_finish: per head the warps' max and their sum of weight * l
    bool last;
};

// attn_fd_cluster: what a block receives from the cluster's blocks (itself included) before the
// cluster barrier: every split's (max, sum) per head, and every split's unnormalised output over this
// block's share of the group's outputs (share = ceil(group * D / n_split) outputs; split s's at
// acc[s * share ...]). Pushed by the senders, so that after the barrier a block reads only its own
// shared memory.
template <int D, int G>
struct FdClusterInbox {
    float m[kFdMaxCluster][G], l[kFdMaxCluster][G];
    float acc[G * D + kFdMaxCluster];  // n_split * share < group * D + n_split
};
template <int D, int G>
__device__ inline FdClusterInbox<D, G> &fd_cluster_inbox() {
    __shared__ FdClusterInbox<D, G> inbox;
    return inbox;
}

// attn_fd_cluster: the kernel's first arrival at the cluster barrier (relaxed: it orders nothing),
// waited for before the first push, so that no block writes into a block of its cluster that has not
// started (the programming guide's condition for distributed shared memory). By then every block has
// long arrived: the wait costs nothing.
__device__ inline void fd_cluster_arrive_started() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ inline void fd_cluster_wait_started() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

// Whether token t is alone in its sequence (sequence t): then only its own position's K/V row is
// written during the step. seq_token_start is a step input, readable before griddepcontrol.wait.
__device__ inline bool fd_alone(const DecodeAttentionParams &p, int t) {
    return p.seq_token_start && p.seq_token_start[t] == t && p.seq_token_start[t + 1] == t + 1;
}

// Which of a step's rows a load takes (knob attn_fd_early_kv 2): all, those older than the newest
// position (before griddepcontrol.wait), the newest alone (after it).
enum FdRows { kAllRows, kOlderRows, kNewestRow };

// Whether a warp of a PREFETCH variant loads its first step (`first`, of step_positions positions)
// before griddepcontrol.wait (knob attn_fd_early_kv): its token is alone and every row of the step
// predates the token's position.
template <bool PREFETCH>
__device__ inline bool fd_early_step(bool alone, int first, int step_end, int step_positions, int length) {
    return HP_CUDA_ATTN_FD_EARLY_KV && PREFETCH && alone && first < step_end && (first + 1) * step_positions < length;
}

// The warp steps [begin, end) of split `split` of n_split (knob attn_fd_split_balance, CUDA-core
// kernel): 1: split s starts at floor(s * n_step / n_split), so that the splits differ by at most one
// step and the extra steps go to the last splits (one step past a multiple of the warps, as at 1025
// positions, then makes one warp of the last split take two steps, the second the newest position's,
// instead of one warp of every split); 0: ceil(n_step / n_split) steps each, the last splits taking
// what is left (at 1025 positions, qwen3-30b-a3b: 9 steps for 8 warps in 14 of 16 splits, none in the
// last).
template <bool BALANCE>
__device__ inline void fd_split_range(int n_step, int n_split, int split, int &begin, int &end) {
    if constexpr (BALANCE) {
        begin = int(int64_t(n_step) * split / n_split);
        end = int(int64_t(n_step) * (split + 1) / n_split);
    } else {
        const int split_steps = (n_step + n_split - 1) / n_split;
        begin = min(n_step, split * split_steps);
        end = min(n_step, begin + split_steps);
    }
}

// The cache row (in rows of n_head_kv * d_head elements) of position `at` of the sequence whose
// block table is `table`: its paged block's entry times block_tokens plus the offset in the block.
__device__ inline int64_t paged_row(const DecodeAttentionParams &p, const int32_t *table, int at) {
    const int block = p.block_shift >= 0 ? at >> p.block_shift : at / p.block_tokens;
    return int64_t(table[block]) * p.block_tokens + at - block * p.block_tokens;
}

// attn_fd_cluster: thread o = (h, i) of the combination of split `split`'s warps hands its result
// to the cluster: (max, sum) of head h to block i's inbox for i < n_split, and output o to the inbox
// of the block whose share holds it.
template <int D, int G>
__device__ inline void fd_cluster_push(int n_split, int split, int n_out, int o, float m, float l, float value) {
    static_assert(kFdMaxCluster <= D, "a head's (max, sum) reach every split from threads i < n_split");
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    FdClusterInbox<D, G> &inbox = fd_cluster_inbox<D, G>();
    const int h = o / D, i = o % D, share = (n_out + n_split - 1) / n_split, owner = o / share;
    if (i < n_split) {
        FdClusterInbox<D, G> *to = cluster.map_shared_rank(&inbox, i);
        to->m[split][h] = m;
        to->l[split][h] = l;
    }
    cluster.map_shared_rank(&inbox, owner)->acc[split * share + o - owner * share] = value;
}

// attn_fd_cluster: the splits of (t, g) are the blocks of one cluster (rank = split). Each block has
// pushed its split's state into the cluster's inboxes (fd_cluster_push); after the cluster barrier
// every block computes the splits' weights and their total per head as the last block of the other
// path does (lane s takes split s, warp reductions in the same order), then adds the splits in split
// order for its share of the group's outputs: the same arithmetic, so the same bits. Everything after
// the barrier is in the block's own shared memory, so no block waits for another to finish reading
// it (pulling the states through distributed shared memory took two remote round trips and a second
// cluster barrier).
// OPROJ (knob attn_fd_oproj, 1 or 2: how the slice was loaded): the outputs also go to every block of
// the cluster, which then does o_proj (attention_oproj.cuh) with its weights' slice `oproj_slice`.
template <int D, int G, int W, int OPROJ = 0>
__device__ inline void fd_cluster_finish(const DecodeAttentionParams &p, int t, int head0, int split, FdShared<D, G, W> &sh,
                                         __nv_bfloat16 *out, int g = 0, const uint4 *oproj_slice = nullptr) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const FdClusterInbox<D, G> &inbox = fd_cluster_inbox<D, G>();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int group = fd_block_group(p), n_split = p.n_split, n_out = group * D, share = (n_out + n_split - 1) / n_split;
    cluster.sync();  // every split's pushes are in every inbox (released by the arrival, acquired by the wait)
    fd_trace(p, 5);
    for (int h = warp; h < group; h += W) {
        const float ms = lane < n_split ? inbox.m[lane][h] : -INFINITY, ls = lane < n_split ? inbox.l[lane][h] : 0.0f;
        float m_max = ms;
        for (int offset = 16; offset > 0; offset /= 2) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, offset));
        const float weight = lane < n_split && ms != -INFINITY ? exp2f(ms - m_max) : 0.0f;
        float total = 0.0f;
        if (lane < n_split) total += weight * ls;
        for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
        if (lane < n_split) sh.weight[lane][h] = weight;
        if (lane == 0) sh.total[h] = total;
    }
    __syncthreads();
    const int first = split * share, end = min(n_out, first + share);
    for (int o = first + int(threadIdx.x); o < end; o += W * 32) {
        const int h = o / D;
        float acc[kFdMaxCluster];
#pragma unroll
        for (int s = 0; s < kFdMaxCluster; ++s) acc[s] = s < n_split ? inbox.acc[s * share + o - first] : 0.0f;
        float value = 0.0f;
#pragma unroll
        for (int s = 0; s < kFdMaxCluster; ++s) {
            if (s < n_split) value += sh.weight[s][h] * acc[s];
        }
        const __nv_bfloat16 rounded = __float2bfloat16_rn(value / sh.total[h]);
        out[(int64_t(t) * p.n_head + head0 + h) * D + o % D] = rounded;
        if constexpr (OPROJ != 0) fd_oproj_push<D, G>(n_split, o, __bfloat162float(rounded));
    }
    if constexpr (OPROJ != 0) fd_oproj_finish<D, G, W, OPROJ>(p.oproj, oproj_slice, g, p.n_head_kv, group * D, split, n_split);
}

// The end of a flash-decoding block once every warp has written its state to `sh`: the warps are
// combined in warp order, then either the bf16 output is written (one split) or the split's
// partial, and the last block of (t, y) to arrive adds the splits in split order. y: the grid's
// kv-head coordinate (the kv head where head_split is 1).
template <int D, int G, int W = kFdWarps, bool CLUSTER = false, int OPROJ = 0>
__device__ inline void fd_block_finish(const DecodeAttentionParams &p, int t, int y, int split, FdShared<D, G, W> &sh, float *partial,
                                       int32_t *counters, __nv_bfloat16 *out, const uint4 *oproj_slice = nullptr) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int group = fd_block_group(p), head0 = fd_block_head0(p, y);
    __syncthreads();
    fd_trace(p, 3);
    if constexpr (CLUSTER) fd_cluster_wait_started();
    // The block's warps in warp order; a warp without positions has m = -inf and weighs 0. Thread h
    // takes head h's weights exp2(m_w - max), in place of the warps' m, and their sum of weight * l,
    // once for the head's D outputs (each of which then is W products).
    const int64_t partial_row = int64_t(D + 2);
    for (int h = threadIdx.x; h < group; h += W * 32) {
        float m_max = -INFINITY;
        for (int w = 0; w < W; ++w) m_max = fmaxf(m_max, sh.m[w][h]);
        float sum = 0.0f;
        for (int w = 0; w < W; ++w) {
            const float weight = sh.m[w][h] == -INFINITY ? 0.0f : exp2f(sh.m[w][h] - m_max);
            sum += weight * sh.l[w][h];
            sh.m[w][h] = weight;
        }
        sh.head_m[h] = m_max;
        sh.head_l[h] = sum;
    }
    __syncthreads();
    for (int o = threadIdx.x; o < group * D; o += W * 32) {
        const int h = o / D, i = o % D;
        const float m_max = sh.head_m[h], sum = sh.head_l[h];
        float value = 0.0f;
        for (int w = 0; w < W; ++w) value += sh.m[w][h] * sh.acc[w][h][i];
        if (p.n_split == 1) {
            out[(int64_t(t) * p.n_head + head0 + h) * D + i] = __float2bfloat16_rn(value / sum);
            continue;
        }
        if constexpr (CLUSTER) {
            fd_cluster_push<D, G>(p.n_split, split, group * D, o, m_max, sum, value);
            continue;
        }
        float *row = partial + ((int64_t(t) * p.n_head + head0 + h) * p.n_split + split) * partial_row;
        if (i == 0) {
            row[0] = m_max;
            row[1] = sum;
        }
        row[2 + i] = value;
    }
    if (HP_CUDA_ATTN_TRACE) __syncthreads();
    fd_trace(p, 4);
    if (p.n_split == 1) {
        if constexpr (OPROJ != 0) __trap();  // the host folds o_proj only into 2..attn_fd_cluster splits: the slice would be left landing
        return;
    }
    if constexpr (CLUSTER) {
        fd_cluster_finish<D, G, W, OPROJ>(p, t, head0, split, sh, out, fd_block_kv_head(p, y), oproj_slice);
        return;
    }
    // The last block of (t, y) to finish adds the splits.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t *counter = counters + int64_t(t) * p.n_head_kv * fd_head_split(p) + y;
        sh.last = atomicAdd(counter, 1) == p.n_split - 1;
        if (sh.last) *counter = 0;  // every block of this (t, y) has counted: ready for the next step
    }
    __syncthreads();
    if (!sh.last) return;
    __threadfence();
    // Per head: the splits' weights exp2(m_s - max) and their weighted sum of l.
    for (int h = warp; h < group; h += W) {
        const float *rows = partial + (int64_t(t) * p.n_head + head0 + h) * p.n_split * partial_row;
        float m_max = -INFINITY;
        for (int s = lane; s < p.n_split; s += 32) m_max = fmaxf(m_max, __ldcg(rows + s * partial_row));
        for (int offset = 16; offset > 0; offset /= 2) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, offset));
        float total = 0.0f;
        for (int s = lane; s < p.n_split; s += 32) {
            const float ms = __ldcg(rows + s * partial_row);
            const float weight = ms == -INFINITY ? 0.0f : exp2f(ms - m_max);
            sh.weight[s][h] = weight;
            total += weight * __ldcg(rows + s * partial_row + 1);
        }
        for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
        if (lane == 0) sh.total[h] = total;
    }
    __syncthreads();
    // The weighted sum of the splits' outputs, two elements per load: each thread holds its kPairs
    // pairs (of every head of the group) and walks the splits in order, kUnrollSplits at a time with
    // no branch inside (a split past n_split reloads the last one with weight 0), so that kPairs *
    // kUnrollSplits independent loads are in flight (one output at a time, the loads from L2 were a
    // chain of n_split latencies per element).
    constexpr int kPairs = (G * D / 2 + W * 32 - 1) / (W * 32), kUnrollSplits = HP_CUDA_ATTN_FD_REDUCE_UNROLL;
    const int n_pair = group * D / 2;
    const float *pair_row[kPairs];
    int pair_head[kPairs];
    float2 value[kPairs];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
        const int o = min(int(threadIdx.x) + j * W * 32, n_pair - 1);
        pair_head[j] = 2 * o / D;
        pair_row[j] = partial + (int64_t(t) * p.n_head + head0 + pair_head[j]) * p.n_split * partial_row + 2 + 2 * o % D;
        value[j] = make_float2(0.0f, 0.0f);
    }
    for (int s0 = 0; s0 < p.n_split; s0 += kUnrollSplits) {
        float2 v[kUnrollSplits][kPairs];
#pragma unroll
        for (int u = 0; u < kUnrollSplits; ++u) {
            const int s = min(s0 + u, p.n_split - 1);
#pragma unroll
            for (int j = 0; j < kPairs; ++j) v[u][j] = __ldcg(reinterpret_cast<const float2 *>(pair_row[j] + s * partial_row));
        }
#pragma unroll
        for (int u = 0; u < kUnrollSplits; ++u) {
            const int s = min(s0 + u, p.n_split - 1);
#pragma unroll
            for (int j = 0; j < kPairs; ++j) {
                const float weight = s0 + u < p.n_split ? sh.weight[s][pair_head[j]] : 0.0f;
                value[j].x += weight * v[u][j].x;
                value[j].y += weight * v[u][j].y;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
        const int o = int(threadIdx.x) + j * W * 32;
        if (o >= n_pair) break;
        const int h = 2 * o / D, i = 2 * o % D;
        const float total = sh.total[h];
        *reinterpret_cast<__nv_bfloat162 *>(out + (int64_t(t) * p.n_head + head0 + h) * D + i) =
            __floats2bfloat162_rn(value[j].x / total, value[j].y / total);
    }
}

// See the top of the file. partial: f32 [token][n_head][n_split][D + 2] (max, sum, acc[D]);
// counters: int32 [token][n_head_kv * head_split], zero between steps; out: bf16 [token][n_head][D].
// PREFETCH: each warp loads its next step's rows before this step's math (steps of at most
// HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS tokens: latency-bound launches gain, full ones lose blocks per
// SM). The variant for full launches (no prefetch, group <= 4) asks for HP_CUDA_ATTN_FD_MIN_BLOCKS
// blocks of kFdWarps warps per SM (fd_min_blocks; at 4: 128 registers, no spills at d_head 64); the
// others would spill under it.
// RING: knob attn_fd_ring (see fd_ring_bytes), a template argument so that test_cuda_attention runs
// both load schedules whatever the build's knobs; SCATTER: knob attn_fd_scatter_scores (see the step
// below), likewise.
template <hp_dtype KV, int D, int G, bool PREFETCH, int W = kFdWarps, bool CLUSTER = false, int RING = HP_CUDA_ATTN_FD_RING,
          int SCATTER = HP_CUDA_ATTN_FD_SCATTER_SCORES, int OPROJ = 0>
__global__ void __launch_bounds__(W * 32, PREFETCH || G > 4 ? 1 : fd_min_blocks(W)) decode_attention_kernel(DecodeAttentionParams p, const float *q, const int32_t *positions,
                                                                        const int32_t *token_seq, const int32_t *block_tables,
                                                                        const void *k_cache, const void *v_cache, float *partial,
                                                                        int32_t *counters, __nv_bfloat16 *out) {
    constexpr int kLanesPerRow = D / 8, kRowsPerLoad = 32 / kLanesPerRow, kStep = kRowsPerLoad * kFdUnroll;
    __shared__ FdShared<D, G, W> sh;
    static_assert(D % 8 == 0 && 32 % (D / 8) == 0, "d_head: 8 lanes of 16 bytes divide a warp");
    static_assert(OPROJ == 0 || (PREFETCH && CLUSTER), "attn_fd_oproj: one token's PREFETCH blocks in clusters (its slice is the dynamic shared memory)");
    fd_trace(p, 0);
    if constexpr (CLUSTER) fd_cluster_arrive_started();
    if (hp_cuda_gemv::kL2Prefetch) hp_cuda_gemv::prefetch_l2(p.prefetch, hp_cuda_gemv::linear_block(), hp_cuda_gemv::grid_blocks());
    // Grid (kv head, token, split), or (split, kv head, token) in clusters of the splits; with
    // head_split the kv-head coordinate y counts head_split blocks per kv head g (fd_block_head0).
    const int y = CLUSTER ? blockIdx.y : blockIdx.x, t = CLUSTER ? blockIdx.z : blockIdx.y, split = CLUSTER ? blockIdx.x : blockIdx.z;
    const int g = fd_block_kv_head(p, y);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane / kLanesPerRow, chunk = lane % kLanesPerRow;  // position in a load, 8-element chunk of the row
    const int group = fd_block_group(p), head0 = fd_block_head0(p, y);

    // positions, block_tables and seq_token_start are the step's inputs, written before its first
    // kernel: readable before the wait. The token's sequence is token_seq's (a kernel's output)
    // unless the token is its sequence's only one (`alone`: sequence t, read from seq_token_start).
    const int length = positions[t] + 1;
    const int n_step = (length + kStep - 1) / kStep;
    int step_begin, step_end;
    fd_split_range<HP_CUDA_ATTN_FD_SPLIT_BALANCE == 1>(n_step, p.n_split, split, step_begin, step_end);
    const bool alone = fd_alone(p, t);
    const int32_t *table = alone ? block_tables + int64_t(t) * p.max_blocks : nullptr;
    const int64_t row_width = int64_t(p.n_head_kv) * D;
    const auto *k_base = static_cast<const uint16_t *>(k_cache) + int64_t(g) * D + chunk * 8;
    const auto *v_base = static_cast<const uint16_t *>(v_cache) + int64_t(g) * D + chunk * 8;

    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
    }
    // Step `step`'s K and V rows of this lane into k_raw, v_raw. When a step lies inside one paged
    // block (block_tokens a multiple of the step) one table entry serves the step, and rows past
    // the sequence are read from that (allocated) block (knob attn_fd_early_kv 2: its last row);
    // otherwise each row looks its block up and rows past the sequence read its last row. Their
    // scores are dropped and V zeroed below. ROWS (attn_fd_early_kv 2): kAllRows, or kOlderRows the
    // rows before the newest position (loaded before the wait) or kNewestRow that one (after it).
    constexpr bool kClampTail = HP_CUDA_ATTN_FD_EARLY_KV == 2;
    const bool step_in_block = p.block_tokens % kStep == 0;
    int64_t lane_row[kFdUnroll];
#pragma unroll
    for (int u = 0; u < kFdUnroll; ++u) lane_row[u] = int64_t(u * kRowsPerLoad + sub) * row_width;
    auto load_step = [&](int step, uint4 k_raw[kFdUnroll], uint4 v_raw[kFdUnroll], FdRows rows = kAllRows) {
        const int first = step * kStep;
        if (step_in_block && !kClampTail) {
            const int64_t step_row = paged_row(p, table, first) * row_width;
#pragma unroll
            for (int u = 0; u < kFdUnroll; ++u) {
                k_raw[u] = load_kv(k_base + step_row + lane_row[u]);
                v_raw[u] = load_kv(v_base + step_row + lane_row[u]);
            }
            return;
        }
        const int64_t step_row = step_in_block ? paged_row(p, table, first) * row_width : 0;
#pragma unroll
        for (int u = 0; u < kFdUnroll; ++u) {
            const int at = min(first + u * kRowsPerLoad + sub, length - 1);
            if (rows != kAllRows && (at == length - 1) != (rows == kNewestRow)) continue;
            const int64_t row = step_in_block ? step_row + int64_t(at - first) * row_width : paged_row(p, table, at) * row_width;
            k_raw[u] = load_kv(k_base + row);
            v_raw[u] = load_kv(v_base + row);
        }
    };
    // Knob attn_fd_ring (the variant without PREFETCH): this thread's 2 * kFdUnroll chunks of a step
    // go by cp.async to stage i of its warp's ring, ring[((warp * RING + i) * 2 * kFdUnroll + j) * 32 +
    // lane] (K then V), RING - 1 steps ahead of the one it multiplies; it reads back only its own copies.
    constexpr bool kRing = !PREFETCH && RING >= 2;
    static_assert(fd_ring_bytes<PREFETCH, W, RING>() + sizeof(FdShared<D, G, W>) + fd_scatter_bytes<SCATTER, W, G, kLanesPerRow>() <= 232448,
                  "attn_fd_ring: the ring, the block's state and the scores' hand-out (attn_fd_scatter_scores 2) exceed 227 KB");
    extern __shared__ uint4 fd_ring[];
    int ring_next = step_begin + warp, ring_stage = 0;
    auto copy_step = [&](int step, int stage) {
        const int first = step * kStep;
        uint4 *at = fd_ring + size_t(warp * RING + stage) * 2 * kFdUnroll * 32 + lane;
#pragma unroll
        for (int u = 0; u < kFdUnroll; ++u) {
            const int64_t row = step_in_block ? paged_row(p, table, first) * row_width + lane_row[u]
                                              : paged_row(p, table, min(first + u * kRowsPerLoad + sub, length - 1)) * row_width;
            fd_cp_async16(at + u * 32, k_base + row);
            fd_cp_async16(at + (kFdUnroll + u) * 32, v_base + row);
        }
    };
    // Early KV (knob attn_fd_early_kv): a token alone in its sequence has only its newest row
    // written in this step (before this kernel), so the warp's first step, if wholly older, is
    // loaded before the wait and streams while the q/k/v projection finishes. PREFETCH variant only:
    // the other, held to 128 registers, took 0.28 instead of 0.20 ms a step at batch 8 with it.
    // With attn_fd_early_kv 2 every warp's first step goes out before the wait but for the newest
    // position's row (and rows past the sequence, which read it), loaded after the wait from L2.
    uint4 k_next[kFdUnroll], v_next[kFdUnroll];
    // Knob attn_fd_head (attention_head.cuh): q arrives as the q/k/v launch left it and this kernel
    // does the head kernel's work; the rotation and the norms' weights are ready before the wait. The
    // warp whose steps hold the newest position writes that position's K and V rows (head.k set only
    // for decode steps, every token alone: no other block reads the row in this step).
    const bool fold = kFdHead && p.head.k != nullptr;
    float head_cos[8], head_sin[8], q_norm_w[8], k_norm_w[8];
    if (fold) {
        fd_head_rotation<D>(p.head.inv_freq, length - 1, chunk, head_cos, head_sin);
        fd_head_weights(p.head.norm_dtype, p.head.q_norm, chunk * 8, q_norm_w);
        fd_head_weights(p.head.norm_dtype, p.head.k_norm, chunk * 8, k_norm_w);
    }
    const bool writes_newest = fold && n_step - 1 >= step_begin && n_step - 1 < step_end && (n_step - 1 - step_begin) % W == warp;
    const bool early = kClampTail ? PREFETCH && alone && step_begin + warp < step_end
                                  : fd_early_step<PREFETCH>(alone, step_begin + warp, step_end, kStep, length);
    if (early) load_step(step_begin + warp, k_next, v_next, kClampTail ? kOlderRows : kAllRows);
    // Knob attn_fd_oproj: this block's slice of o_proj's weights streams from here on (after the K/V loads).
    if constexpr (OPROJ != 0) fd_oproj_load_slice<OPROJ>(p.oproj, fd_ring, p.n_head * D, head0 * D, group * D, split, p.n_split);
    // Knob attn_fd_launch_early (PREFETCH variants): the kernel after it (o_proj) may launch once this
    // block's first K/V loads are asked for, so that its weights stream while this kernel waits and
    // reduces; otherwise it launches after the warp steps (below).
    constexpr bool kLaunchEarly = PREFETCH && HP_CUDA_ATTN_FD_LAUNCH_EARLY;
    if constexpr (kLaunchEarly) hp_cuda_gemv::launch_dependents();
    hp_cuda_gemv::wait_for_previous_grid();  // q, the newest K/V row (with attn_fd_head: raw k and v) and token_seq are the previous kernels' output
    fd_trace(p, 1);
    if (writes_newest) {  // before any load of the row (attn_fd_early_kv 2 loads it next)
        // (the kernel takes the cache as const for its reads; with attn_fd_head it writes this one row of it)
        fd_head_write_newest<KV, D>(p.head, const_cast<void *>(k_cache), const_cast<void *>(v_cache), p.n_head_kv, t, g, chunk, sub,
                                    paged_row(p, table, length - 1) * row_width + int64_t(g) * D, k_norm_w, head_cos, head_sin);
    }
    if (kClampTail && early) load_step(step_begin + warp, k_next, v_next, kNewestRow);
    if (!alone) table = block_tables + int64_t(token_seq[t]) * p.max_blocks;
    float q_r[G][8];
    if (fold) {
        fd_head_prepare_q<D, G>(p.head, q, p.n_head, t, head0, group, chunk, p.scale_log2, q_norm_w, head_cos, head_sin, q_r);
    } else {
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int e = 0; e < 8; ++e) q_r[h][e] = h < group ? q[(int64_t(t) * p.n_head + head0 + h) * D + chunk * 8 + e] * p.scale_log2 : 0.0f;
        }
    }
    if (PREFETCH && !early && step_begin + warp < step_end) load_step(step_begin + warp, k_next, v_next);
    if constexpr (kRing) {  // the first RING - 1 steps, one commit group each (empty past the split)
#pragma unroll
        for (int i = 0; i < RING - 1; ++i) {
            if (ring_next < step_end) copy_step(ring_next, i);
            hp_cuda_gemv::cp_async_commit();
            ring_next += W;
        }
    }
    for (int step = step_begin + warp; step < step_end; step += W) {
        uint4 k_raw[kFdUnroll], v_raw[kFdUnroll];
        bool valid[kFdUnroll];
#pragma unroll
        for (int u = 0; u < kFdUnroll; ++u) valid[u] = step * kStep + u * kRowsPerLoad + sub < length;
        if constexpr (PREFETCH) {
#pragma unroll
            for (int u = 0; u < kFdUnroll; ++u) {
                k_raw[u] = k_next[u];
                v_raw[u] = v_next[u];
            }
            if (step + W < step_end) load_step(step + W, k_next, v_next);
        } else if constexpr (kRing) {
            hp_cuda_gemv::cp_async_wait<RING - 2>();  // this thread's copies of this step have landed
            const uint4 *at = fd_ring + size_t(warp * RING + ring_stage) * 2 * kFdUnroll * 32 + lane;
#pragma unroll
            for (int u = 0; u < kFdUnroll; ++u) {
                k_raw[u] = at[u * 32];
                v_raw[u] = at[(kFdUnroll + u) * 32];
            }
            // Refill the stage read in the previous iteration (its values are used by now).
            if (ring_next < step_end) copy_step(ring_next, (ring_stage + RING - 1) % RING);
            hp_cuda_gemv::cp_async_commit();
            ring_next += W;
            ring_stage = ring_stage + 1 == RING ? 0 : ring_stage + 1;
        } else {
            load_step(step, k_raw, v_raw);
        }
        if (step * kStep + kStep > length) {  // the sequence's last step: rows past it may hold anything
#pragma unroll
            for (int u = 0; u < kFdUnroll; ++u) {
                if (!valid[u]) v_raw[u] = make_uint4(0, 0, 0, 0);
            }
        }
        if constexpr (SCATTER != 0) fd_scatter_step<KV, G, kLanesPerRow, SCATTER, W>(q_r, k_raw, v_raw, valid, m, l, acc, warp, lane);
        else fd_butterfly_step<KV, G, kLanesPerRow>(q_r, k_raw, v_raw, valid, m, l, acc);
    }
    if constexpr (kRing) hp_cuda_gemv::cp_async_wait<0>();  // only empty groups are left
    fd_trace(p, 2);
    // Only now may the o_proj GEMV after it launch: its blocks ask for all their weights before their
    // own wait, and launched at this kernel's start they queued this block's K/V loads behind those in
    // DRAM (qwen3-30b-a3b batch 1: 3.271 -> 3.227 ms; bench/RESULTS.md). Its weights now stream during
    // the reductions below.
    if constexpr (!kLaunchEarly) hp_cuda_gemv::launch_dependents();
    // The warp's rows: sum the kRowsPerLoad position lanes of each chunk (the max is the same in every row).
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int offset = kLanesPerRow; offset < 32; offset *= 2) {
            if (SCATTER == 0) l[h] += __shfl_xor_sync(0xffffffffu, l[h], offset);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] += __shfl_xor_sync(0xffffffffu, acc[h][e], offset);
        }
        if (sub == 0) {
#pragma unroll
            for (int e = 0; e < 8; ++e) sh.acc[warp][h][chunk * 8 + e] = acc[h][e];
            if (SCATTER == 0 && chunk == 0) {
                sh.m[warp][h] = m[h];
                sh.l[warp][h] = l[h];
            }
        }
    }
    if constexpr (SCATTER != 0) {  // m[i], l[i]: head fd_scatter_head0 + i of this lane's chunk (each of the row's lanes of a head holds them)
        constexpr int H = fd_scatter_heads<G, kLanesPerRow>();
#pragma unroll
        for (int i = 0; i < H; ++i) {
#pragma unroll
            for (int offset = kLanesPerRow; offset < 32; offset *= 2) l[i] += __shfl_xor_sync(0xffffffffu, l[i], offset);
        }
        if (sub == 0 && chunk % fd_scatter_lanes<G, kLanesPerRow>() == 0) {
#pragma unroll
            for (int i = 0; i < H; ++i) {
                sh.m[warp][fd_scatter_head0<G, kLanesPerRow>(chunk) + i] = m[i];
                sh.l[warp][fd_scatter_head0<G, kLanesPerRow>(chunk) + i] = l[i];
            }
        }
    }
    fd_block_finish<D, G, W, CLUSTER, OPROJ>(p, t, y, split, sh, partial, counters, out, fd_ring);
    fd_trace(p, 6);
}

// How many clusters of n_split blocks of `kernel` (`warps` warps each) this device holds at once on
// an idle GPU (cudaOccupancyMaxActiveClusters: a cluster's blocks share one GPC); 0 where it cannot
// schedule them (above 8 a non-portable size, which a device or partition may refuse). Asked once
// per (kernel, size, device, shared memory).
template <typename... Params>
int fd_max_clusters(void (*kernel)(Params...), int n_split, int warps, size_t shared_bytes) {
    static thread_local std::map<std::tuple<const void *, int, int, size_t>, int> known;
    int device = 0;
    cudaGetDevice(&device);
    const auto key = std::make_tuple(reinterpret_cast<const void *>(kernel), n_split, device, shared_bytes);
    if (const auto it = known.find(key); it != known.end()) return it->second;
    if (n_split > 8) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(n_split), 1, 1);
    config.blockDim = dim3(unsigned(warps * 32));
    config.dynamicSmemBytes = shared_bytes;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = unsigned(n_split);
    cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    const cudaError_t asked = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (asked != cudaSuccess) cudaGetLastError();  // a refused size leaves no error behind: the caller takes the other path
    return known[key] = asked == cudaSuccess ? clusters : 0;
}

// Launches a decode_attention_kernel variant for p.n_split splits: grid (kv head, token, split), or
// with CLUSTER (split, kv head, token) in clusters of the n_split splits, where the device can
// schedule them and, with one_wave, hold all n_head_kv * n_token of them at once (else nothing is
// launched and it returns false). n_head_kv: the grid's kv-head rows (kv heads x attn_fd_head_split).
// A launch whose clusters come in two waves waits a whole cluster's time for the last ones (qwen3-30b-a3b
// batch 1 with attn_fd_head_split 2: 8 clusters of 16 one-block-per-SM blocks on an H100, the last
// passing the wait ~6 us after the first), more than the last-block reduction costs.
template <bool CLUSTER, typename... Params, typename... Args>
bool launch_decode_attention_kernel(void (*kernel)(Params...), int n_head_kv, int n_token, int n_split, int warps, size_t shared_bytes,
                                    bool one_wave, cudaStream_t stream, Args &&...args) {
    if constexpr (CLUSTER) {
        if (n_split < 2 || n_split > kFdMaxCluster) return false;
        const int fit = fd_max_clusters(kernel, n_split, warps, shared_bytes);
        if (fit <= 0 || (one_wave && fit < n_head_kv * n_token)) return false;
        hp_cuda_gemv::launch_pdl_clustered(kernel, dim3(n_split, n_head_kv, n_token), dim3(warps * 32), shared_bytes, unsigned(n_split), stream,
                                           std::forward<Args>(args)...);
    } else {
        hp_cuda_gemv::launch_pdl(kernel, dim3(n_head_kv, n_token, n_split), dim3(warps * 32), shared_bytes, stream, std::forward<Args>(args)...);
    }
    return true;
}

// Splits per (token, kv head): enough blocks for `target_blocks` (HP_CUDA_ATTN_FD_TARGET_BLOCKS) over
// the step, but at least HP_CUDA_ATTN_FD_MIN_STEPS warp steps per warp, at most kFdMaxSplit and
// `max_split` (the partials' capacity). From host scalars only (graph-capturable).
inline int decode_attention_splits(int n_token, int n_head_kv, int d_head, int max_positions, int max_split, int warps = kFdWarps,
                                   int target_blocks = HP_CUDA_ATTN_FD_TARGET_BLOCKS) {
    const int pairs = n_token * n_head_kv, step = fd_step_positions(d_head);
    const int n_step = (max_positions + step - 1) / step;
    int n_split = (target_blocks + pairs - 1) / pairs;
    n_split = n_split < n_step / (warps * HP_CUDA_ATTN_FD_MIN_STEPS) ? n_split : n_step / (warps * HP_CUDA_ATTN_FD_MIN_STEPS);
    n_split = n_split < kFdMaxSplit ? n_split : kFdMaxSplit;
    n_split = n_split < max_split ? n_split : max_split;
    return n_split > 1 ? n_split : 1;
}

}  // namespace hp_cuda_baseline
