// One-token MoE FFN in one launch (knob moe_fused): the router GEMV, the routing, gate/up/SiLU and
// down_proj of the k chosen experts, accumulated into the residual with the next RMSNorm folded.
// It replaces the four launches of the one-token path (router GEMV, route_group_kernel, the grouped
// gate/up, expert_down_single_kernel), each of which paid a launch boundary for a few microseconds
// of bytes: qwen3-30b-a3b batch 1 spent ~42 us a layer on them for ~18 us of expert weights.
//
// One block per SM (cooperative launch, so all are resident), moe_fused_warps warps each; every
// warp streams whole weight rows with 16-byte loads into registers (no reduction across blocks), in
// four phases with two grid-wide barriers:
//   router   warp w of the grid takes router rows w, w + warps, ...; its first row's loads are
//            issued before griddepcontrol.wait (the only weights known before the previous kernel
//            ends). logit = (row . h) / rms, to `logits`.                               barrier 1
//            (Knob moe_fused_logit_flags: no barrier 1. Each logit also goes out as one 64-bit word
//            with the launch's tag, and every block's warp 0 polls the words until all carry it.)
//   route    every block routes the token itself from the logits (route_single: softmax, top-k,
//            ties to the lower index, the experts in id order) and looks up their matrices (knob
//            moe_fused_tables_shared: in the expert tables copied to shared memory before the
//            previous kernel ended); block 0 writes the routing (as moe_single_route does).
//   gate/up  items (expert a, row j) of the k * d_ff rows, warp w of the grid taking items w,
//            w + warps, ... (a block's warps take consecutive rows): act[a][j] = bf16(weight[a] *
//            silu(g) * u), g and u scaled by 1/rms. (Knob moe_fused_dynamic_items: warp w takes item w,
//            then claims each next item from a counter, so that warps whose rows come back sooner take
//            more of them and the grid reaches barrier 2 together.)
//   down     block b takes 16-row tiles b, b + blocks, ... of d_model and all k experts' rows of
//            each tile; the first loads of its first tile are issued before           barrier 2
//            (they do not depend on act), then act comes to shared memory. Per row the k experts'
//            dot products are added in expert order, then x += sum, and with norm_out the next
//            norm's bf16 operand and the tile's sum of x^2, exactly as expert_down_single_kernel.
// Tagged act (knob moe_fused_act_tags, with the tensor-core down and the tagged logits): no barrier 2.
// Each act value goes out instead as a 32-bit word carrying the launch's tag (not to act), and each warp of down
// polls the words of its next round of units until they carry it, so a block multiplies the experts
// whose rows are done while the grid's last gate/up rows are in flight.
// Split down (knob moe_fused_split_down) replaces the last two phases, so that no block waits for
// the whole gate/up before its down bytes move:
//   gate/up  block b takes the R items b*R .. b*R + R - 1 (R = fused_split_rows: the k * d_ff items
//            over the grid, a multiple of 8), its warps round-robin, act into its shared memory.
//   down     without waiting for the grid, the block's share of down: partial[b][row] = sum over its
//            items (a, j) of W_down[a][row][j] * act[a][j], each down row's R columns read as 16-byte
//            chunks, G lanes a row (G: a power of two >= R / 8, at most 32).     grid barrier
//   sum      block b takes 16-row tiles b, b + blocks, ... and adds the blocks' partials in block
//            order, then x += sum with norm_out, as the tiled down.
// Its down reads are R columns of every row instead of whole rows (qwen3-30b-a3b: 96 of 1536 bytes,
// whole 32-byte sectors), and the partials (blocks x d_model floats) go through L2.
// The grid barrier is a 64-bit counter that only grows, so launches need no memset and a step stays
// graph-capturable. Deterministic: fixed assignment, fixed order, no atomics
// on values. Requires (fused_fits): one token, no shared expert, d_model and d_ff multiples of 8,
// 16-byte aligned matrices and buffers, bf16 router, k <= kMaxSingleExperts; and (fused_resident) a
// block on every SM. The plugin takes the four-launch path otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "gemv.cuh"
#include "knobs.h"
#include "moe.cuh"
#include "moe_route.cuh"

namespace hp_cuda_moe {

using hp_cuda_gemv::kTileRows;

constexpr int kFusedWarps = HP_CUDA_MOE_FUSED_WARPS;            // warps per block
constexpr int kFusedUnroll = HP_CUDA_MOE_FUSED_UNROLL;          // router, gate/up: 16-byte loads per lane and matrix per iteration
constexpr int kFusedDownUnroll = HP_CUDA_MOE_FUSED_DOWN_UNROLL; // down: 16-byte loads per lane per iteration
constexpr int kFusedMaxShared = 216 * 1024;                     // dynamic shared memory the kernel may take (beside its static)
// Knob moe_fused_dynamic_items: compiled in only when on (with it off the kernel has no trace of it;
// test_cuda_moe_dyn is test_cuda_moe built with it on). At run time it also needs FusedParams::items.
constexpr bool kFusedDynamicItems = HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS;
// Knob moe_fused_act_tags (1): compiled in only when on (test_cuda_moe_barrier is test_cuda_moe built
// with it off); at run time it also needs FusedParams::act_tags and the tagged logits, and is not taken with
// moe_fused_dynamic_items (whose counter is reset after barrier 2).
constexpr bool kFusedActTags = HP_CUDA_MOE_FUSED_ACT_TAGS && !HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS;
constexpr int kFusedMmaRound = kFusedDownUnroll / 2;  // tensor-core down: units per round of loads (a unit is two loads)
// HP_CUDA_MOE_FUSED_TRACE: per block, when it starts, passes griddepcontrol.wait, has written its
// logits, has the grid's logits (barrier 1 passed and the logits read, or the tagged words), has routed, has done its gate/up rows, passes barrier 2, has act in
// shared memory, has done its first down tile's dot products (thread 0's warp), and ends. Split
// down: points 5..8 are gate/up done, its down partials written, the grid barrier passed, its
// first tile summed.
constexpr int kFusedTracePoints = 10;

struct FusedParams {
    const __nv_bfloat16 *router = nullptr;  // bf16 [n_expert][d_model]
    float *logits = nullptr;                // f32 [n_expert]: the router's output (written, then read by every block)
    const __nv_bfloat16 *h = nullptr;       // bf16 [d_model]: the FFN input (bf16(x * ffn_norm) when folded)
    const float *x_sum_sq = nullptr;        // optional: f32 [n_sum_sq] partial sums of x^2 (folded norm)
    int n_sum_sq = 0;
    float norm_eps = 0.0f;
    int n_expert = 0, k = 0, norm_topk_prob = 0;
    int32_t *expert_counts = nullptr;       // optional [n_expert], += picks
    Routing routing;                        // written as the one-token lists
    const __nv_bfloat16 *const *gate = nullptr, *const *up = nullptr, *const *down = nullptr;  // device tables [n_expert]
    __nv_bfloat16 *act = nullptr;           // bf16 [k][d_ff], grouped order
    float *x = nullptr;                     // f32 [d_model] residual
    hp_cuda_gemv::NormOut norm_out;         // optional: the next norm's operand and tile sums
    unsigned long long *barrier = nullptr;  // the grid barrier's arrivals: zero before the first launch, then left to grow
    // Optional [n_expert], zero with the barrier counter and left to the kernel: the logits handed over
    // as (tag << 32) | float bits, with no grid barrier before the routing (knob moe_fused_logit_flags;
    // see fused_logit_tag). Null: barrier 1.
    unsigned long long *logit_tags = nullptr;
    bool tables_shared = false;             // the k experts' matrices looked up in a copy of the tables in shared memory (moe_fused_tables_shared)
    float *partial = nullptr;               // split down: f32 [grid][d_model] workspace (without it, split down is not taken)
    bool stage_down = false;                // each block's first tile of down rows by bulk copies into shared memory (launch_fused sets it)
    int split_rows = 0;                     // split down: items a block takes (launch_fused sets it; 0: the tiled down)
    unsigned long long *trace = nullptr;    // HP_CUDA_MOE_FUSED_TRACE builds, optional: [gridDim.x][kFusedTracePoints] global timer (ns)
    int d_model = 0, d_ff = 0;
    // Optional: the gate/up items' claim counter (knob moe_fused_dynamic_items, kFusedDynamicItems), zero
    // before a launch and set back to zero by block 0 after barrier 2. Null: the fixed round robin. (Last,
    // so that the other members keep their offsets in the kernel's parameters.)
    int *items = nullptr;
    // Optional: u32 [k][d_ff], zero at create and left to the kernel: act as tagged words (knob
    // moe_fused_act_tags, kFusedActTags; see fused_act_tag). Null: barrier 2.
    uint32_t *act_tags = nullptr;
};

// The fused launch of a one-token MoeStep (single_token, its norm_out as the one-token down's): the
// router's bf16 weights, where its logits go, and the grid barrier's counter.
inline FusedParams fused_params(const MoeStep &s, const __nv_bfloat16 *router, float *logits, unsigned long long *barrier,
                                float *partial = nullptr, unsigned long long *logit_tags = nullptr, int *items = nullptr,
                                uint32_t *act_tags = nullptr) {
    FusedParams f;
    f.router = router;
    f.logits = logits;
    f.h = s.h;
    f.x_sum_sq = s.route.x_sum_sq;
    f.n_sum_sq = s.route.n_sum_sq;
    f.norm_eps = s.route.norm_eps;
    f.n_expert = s.route.n_expert;
    f.k = s.route.k;
    f.norm_topk_prob = s.route.norm_topk_prob;
    f.expert_counts = s.route.expert_counts;
    f.routing = s.route.routing;
    f.gate = s.gate;
    f.up = s.up;
    f.down = s.down;
    f.act = s.act;
    f.x = s.x;
    f.norm_out = s.norm_out;
    f.barrier = barrier;
    f.partial = partial;
    f.logit_tags = logit_tags;
    f.items = items;
    f.act_tags = act_tags;
    f.tables_shared = HP_CUDA_MOE_FUSED_TABLES_SHARED;
    f.d_model = s.d_model;
    f.d_ff = s.d_ff;
    return f;
}

// Grid-wide barrier of a fully resident grid over a 64-bit counter that only grows (it never wraps):
// each block adds one (release) and waits (acquire) until the counter reaches the next multiple of
// the grid, so launches need no reset as long as every launch has the same grid. Writes before the
// barrier are visible to reads after it. In two halves, so that the arriving thread can issue loads
// between its arrival and its wait (a release orders the thread's earlier loads too, so they could
// hold back its arrival); the wait is thread 0's acquire loads, then the block's barrier (no fence).
//   fused_grid_arrive: every thread, after the block's writes; thread 0 arrives and gets the target.
//   fused_grid_wait:   every thread; thread 0 spins (acquire) until the target, then the block goes on.
__device__ inline unsigned long long fused_grid_arrive(unsigned long long *counter) {
    __syncthreads();
    unsigned long long target = 0;
    if (threadIdx.x == 0) {
        unsigned long long old;
        __threadfence();  // the block's writes (ordered before thread 0 by __syncthreads), as cooperative_groups' grid sync
        asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(counter) : "memory");
        target = (old / gridDim.x + 1) * gridDim.x;
    }
    return target;
}
__device__ inline void fused_grid_wait(unsigned long long *counter, unsigned long long target) {
    if (threadIdx.x == 0) {  // at least one acquire load, also for the last block (its atomic is a release only)
        unsigned long long seen;
        do {
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(counter) : "memory");
        } while (seen < target);
    }
    __syncthreads();  // the acquire, then the block's barrier: every thread's later reads see the grid's writes
}
__device__ inline void fused_grid_sync(unsigned long long *counter) { fused_grid_wait(counter, fused_grid_arrive(counter)); }

// This launch's index on the barrier counter (counter / grid), from which its tags come. Every block
// reads the counter after griddepcontrol.wait, when every earlier launch on it has ended (each waited
// for the kernel before it), and before the block arrives at this launch's own barrier; the counter
// cannot reach the next multiple of the grid until every block has arrived, so all blocks see the
// same counter / grid. Every launch arrives at least once (one or two grid barriers, or the tagged
// act's single arrival), so the index grows by 1 or 2 from one launch to the next.
__device__ inline unsigned long long fused_launch_index(const unsigned long long *counter) {
    unsigned long long seen;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(counter) : "memory");
    return seen / gridDim.x;
}
// moe_fused_logit_flags: this launch's tag for its logits. Consecutive launches have different tags,
// and no tag is 0, the words' value at create (until 2^32 launches wrap it: the words are all
// rewritten by every launch, so only the previous launch's tag could be seen).
__device__ inline uint32_t fused_logit_tag(unsigned long long launch) { return uint32_t(launch + 1); }
// A router warp's logit for expert e, as one 64-bit word: the value and its launch's tag together,
// so the reader needs no fence or flag besides the word itself.
__device__ inline void put_tagged_logit(unsigned long long *tags, int e, uint32_t tag, float logit) {
    const unsigned long long word = (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(logit);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(tags + e), "l"(word) : "memory");
}
// By one whole warp: waits until the n_expert words carry `tag`, then leaves their logits in
// `logits_s`. A lane's words are loaded together (one L2 round trip a poll, not one per word). A tag
// that never comes (a bug, not a slow producer: ~2^24 polls are seconds) traps, a device fault the
// caller sees, instead of hanging the GPU.
template <int PER_LANE>
__device__ inline void take_tagged_logits(const unsigned long long *tags, int n_expert, uint32_t tag, float *logits_s) {
    const int lane = threadIdx.x % 32;
    bool done = false;
    for (unsigned polls = 0; !__all_sync(0xffffffffu, done); ++polls) {
        if (polls == (1u << 24)) __trap();
        unsigned long long word[PER_LANE];
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            word[i] = 0;
            if (lane + 32 * i < n_expert) asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word[i]) : "l"(tags + lane + 32 * i) : "memory");
        }
        done = true;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            const int e = lane + 32 * i;
            if (e >= n_expert) continue;
            if (uint32_t(word[i] >> 32) == tag) logits_s[e] = __uint_as_float(uint32_t(word[i]));
            else done = false;
        }
    }
    __syncwarp();
}

// moe_fused_act_tags: the 16-bit tag of a launch's act words, from its 64-bit launch index (1..65535,
// never the zero of a word never written; not from the 32-bit logit tag, whose wrap at 2^32 = 65535 *
// 65537 + 1 would give two consecutive launches the same act tag). The words a launch reads were all
// rewritten by the last launch that took this form, whose index is less than 65535 below (the plugin
// runs one form for every layer; launches of other forms on the counter would have to number 65534 in
// between), so a word from an earlier launch never carries the reader's tag.
__device__ inline uint32_t fused_act_tag(unsigned long long launch) { return uint32_t(launch % 65535u) + 1u; }
__device__ inline void put_tagged_act(uint32_t *word, uint32_t tag16, __nv_bfloat16 value) {
    const uint32_t bits = (tag16 << 16) | __bfloat16_as_ushort(value);
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(word), "r"(bits) : "memory");
}
// moe_fused_act_tags, by one whole warp of the tensor-core down: the act of the round's units
// (unit[u] = expert a * n_step + step s, -1 for none; a unit's B fragments are act chunks 4 s .. 4 s + 3
// of expert a, its words a * F + 32 s .. + 31) into `stage` ([kFusedMmaRound][32] bf16, the warp's own):
// lane i loads word i of every unit, and the warp polls until each word carries `tag16` (words past
// d_ff count as zeros). A tag that never comes (a bug: ~2^24 polls are seconds) traps.
__device__ inline void take_tagged_act(const uint32_t *act_tags, const int (&unit)[kFusedMmaRound], int n_step, int F, uint32_t tag16,
                                       __nv_bfloat16 *stage) {
    const int lane = threadIdx.x % 32;
    uint32_t word[kFusedMmaRound];
    bool done = false;
    for (unsigned polls = 0; !__all_sync(0xffffffffu, done); ++polls) {
        if (polls == (1u << 24)) __trap();
        done = true;
#pragma unroll
        for (int u = 0; u < kFusedMmaRound; ++u) {
            const int a = unit[u] / n_step, j = (unit[u] - a * n_step) * 32 + lane;
            word[u] = tag16 << 16;  // a zero of this launch
            if (unit[u] >= 0 && j < F) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(word[u]) : "l"(act_tags + int64_t(a) * F + j) : "memory");
        }
#pragma unroll
        for (int u = 0; u < kFusedMmaRound; ++u) done = done && word[u] >> 16 == tag16;
    }
#pragma unroll
    for (int u = 0; u < kFusedMmaRound; ++u) stage[u * 32 + lane] = __ushort_as_bfloat16(static_cast<unsigned short>(word[u] & 0xffffu));
    __syncwarp();
}

// How the down phase reads its weights: whole rows after the grid has done gate/up, by register
// loads with their products by FMAs (rows) or on tensor cores (mma: moe_fused_down_mma), or the
// block's first tile staged in shared memory during gate/up (staged: moe_fused_stage_down); or split
// by gate/up items (split: moe_fused_split_down).
enum class FusedDown { rows, mma, staged, split };
inline const char *fused_down_name(FusedDown down) {
    return down == FusedDown::mma ? "down on tensor cores" : down == FusedDown::staged ? "staged down" : down == FusedDown::split ? "split down" : "down rows";
}
constexpr FusedDown kFusedDownKnob = HP_CUDA_MOE_FUSED_SPLIT_DOWN   ? FusedDown::split
                                     : HP_CUDA_MOE_FUSED_STAGE_DOWN ? FusedDown::staged
                                     : HP_CUDA_MOE_FUSED_DOWN_MMA   ? FusedDown::mma
                                                                    : FusedDown::rows;

// Split down: the gate/up items a block takes, R = ceil(k * d_ff / blocks) rounded up to a multiple
// of moe_fused_split_align (8: 16-byte chunks; 64: whole 128-byte lines of a down row, fewer blocks).
__host__ __device__ inline int fused_split_rows(int k, int d_ff, int blocks) {
    constexpr int align = HP_CUDA_MOE_FUSED_SPLIT_ALIGN;
    const int per_block = (k * d_ff + blocks - 1) / blocks;
    return (per_block + align - 1) / align * align;
}

// Dynamic shared memory, in bytes from its start: h (bf16 [d_model]), act (bf16 [k][d_ff], split
// down: [split_rows]), the logits (f32 [n_expert]), the down partials (f32 [k][16]; mma:
// [max(k, kFusedWarps)][16]; split down: [2 kFusedWarps][16]), the staged rows' mbarrier and, when
// the block's down rows are staged, those rows (bf16 [k][16][d_ff], 128-byte aligned); with
// tables_shared, the expert tables before them (pointers [3][n_expert]: gate, up, down); with act_tags
// (the tensor-core down's tagged act), each warp's round of act chunks (bf16 [warps][kFusedMmaRound][32]) last.
struct FusedLayout {
    size_t h, act, logits, partial, bar, tables, down, act_stage, total;
};
__host__ __device__ inline FusedLayout fused_layout(int d_model, int d_ff, int k, int n_expert, bool staged, int split_rows = 0, bool mma = false,
                                                    bool tables = false, bool act_tags = false) {
    FusedLayout l;
    l.h = 0;
    l.act = l.h + size_t(d_model) * 2;
    l.logits = l.act + (split_rows ? (size_t(split_rows) * 2 + 15) / 16 * 16 : size_t(k) * d_ff * 2);
    l.partial = l.logits + size_t(n_expert) * 4;
    const int partial_rows = split_rows ? 2 * kFusedWarps : mma && k < kFusedWarps ? kFusedWarps : k;
    l.bar = (l.partial + size_t(partial_rows) * kTileRows * 4 + 7) / 8 * 8;  // an mbarrier is 8-byte aligned (odd n_expert)
    l.tables = l.bar + 8;
    const size_t tables_end = l.tables + (tables ? 3 * size_t(n_expert) * sizeof(void *) : 0);
    l.down = (tables_end + 127) / 128 * 128;
    l.total = staged ? l.down + size_t(k) * kTileRows * d_ff * 2 : tables_end;
    l.act_stage = (l.total + 15) / 16 * 16;
    if (act_tags) l.total = l.act_stage + size_t(kFusedWarps) * kFusedMmaRound * 32 * 2;
    return l;
}

// Split down (see the top of this file), from the end of the block's gate/up items [first, end):
// its share of down to p.partial[block], the grid barrier, then the tiles' sums over the blocks.
// `trace(point)` records points 5..9 (HP_CUDA_MOE_FUSED_TRACE builds).
template <typename Trace>
__device__ inline void split_down(const FusedParams &p, const __nv_bfloat16 *act_s, float *sum_s, const __nv_bfloat16 *const *down_s, int first,
                                  int end, Trace &trace) {
    constexpr int DU = kFusedDownUnroll, W = kFusedWarps;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int D = p.d_model, F = p.d_ff;
    const int n_chunk = (end - first) / 8;             // 16-byte chunks of a down row this block reads
    int G = 1;                                         // lanes a row: a power of two, at most 32
    while (G < n_chunk && G < 32) G *= 2;
    const int per_warp = 32 / G, nq = (n_chunk + G - 1) / G;  // rows a warp load covers; chunks a lane takes of a row
    const int sub = lane / G, cl = lane % G;
    const int n_group = (D + per_warp - 1) / per_warp;       // row groups, warp w taking w, w + W, ...
    const int n_unit = n_chunk > 0 && warp < n_group ? (n_group - warp + W - 1) / W * nq : 0;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint4 wd[DU];
    auto load_units = [&](int m0) {
#pragma unroll
        for (int u = 0; u < DU; ++u) {
            const int m = m0 + u, gi = m / nq, c = cl + G * (m - gi * nq), row = (warp + W * gi) * per_warp + sub;
            const int item = first + 8 * c, a = item / F;
            wd[u] = m < n_unit && c < n_chunk && row < D ? hp_cuda_gemv::load_stream(down_s[a] + int64_t(row) * F + (item - a * F)) : zero;
        }
    };
    load_units(0);  // the weights do not wait for act
    __syncthreads();
    trace(5);
    float acc = 0.0f;
    for (int m0 = 0; m0 < n_unit; m0 += DU) {
        if (m0 > 0) load_units(m0);
#pragma unroll
        for (int u = 0; u < DU; ++u) {
            const int m = m0 + u;
            if (m >= n_unit) break;  // warp-uniform
            const int gi = m / nq, q = m - gi * nq, c = cl + G * q;
            if (c < n_chunk) acc = hp_cuda_gemv::dot_chunk(acc, wd[u], reinterpret_cast<const uint4 *>(act_s)[c]);
            if (q == nq - 1) {  // the row's last unit (warp-uniform): its G lanes' sums
                for (int offset = G / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
                const int row = (warp + W * gi) * per_warp + sub;
                if (cl == 0 && row < D) p.partial[int64_t(blockIdx.x) * D + row] = acc;
                acc = 0.0f;
            }
        }
    }
    if (HP_CUDA_MOE_FUSED_TRACE) __syncthreads();
    trace(6);
    fused_grid_sync(p.barrier);
    trace(7);

    // The tiles' sums: thread t adds row t % 16 of blocks t / 16, t / 16 + 2W, ..., then warp 0 adds
    // those 2W sums in order (fixed order: deterministic).
    const int k = p.k, n_block = (k * F + p.split_rows - 1) / p.split_rows, n_tile = (D + kTileRows - 1) / kTileRows;
    const int r = threadIdx.x % kTileRows, group = threadIdx.x / kTileRows, n_sum = W * 32 / kTileRows;
    for (int tile = blockIdx.x; tile < n_tile; tile += gridDim.x) {
        const int row = tile * kTileRows + r;
        float sum = 0.0f;
        if (row < D) {
#pragma unroll 4
            for (int b = group; b < n_block; b += n_sum) sum += __ldcg(p.partial + int64_t(b) * D + row);
        }
        sum_s[group * kTileRows + r] = sum;
        __syncthreads();
        if (warp == 0) {
            float total = 0.0f;
            for (int g = 0; g < n_sum; ++g) total += sum_s[g * kTileRows + lane % kTileRows];
            accumulate_tile(p.x, p.norm_out, tile * kTileRows, D, total);
        }
        __syncthreads();  // sum_s is rewritten by the next tile
        if (tile == int(blockIdx.x)) trace(8);
    }
    if (int(blockIdx.x) >= n_tile) trace(8);
    trace(9);
}

// DEFAULT_HANDOFF: compiled for the defaults, tagged logits and the tables in shared memory (the
// caller checked p.logit_tags and p.tables_shared), so that neither the barrier-1 path nor the global
// table look-ups are in the kernel. Code the kernel does not run still costs it: one untaken branch
// measured +0.5% of qwen3-30b-a3b's batch-1 step, and this form -0.5% (H100; bench/RESULTS.md).
//
// Registers: one block per SM of 512 threads may take 128 registers a thread, the whole register file,
// and then no block of the launch before it (o_proj) or after it (the next layer's q/k/v), each 64
// registers x 128 threads, can be resident beside it: the fused block starts on an SM only once that
// SM is empty, and the next launch's blocks only once it has left, so neither side's loads overlap the
// other's tail. Knob moe_fused_max_regs (112; 0: __launch_bounds__, i.e. up to 128 at 16 warps) caps it
// with __maxnreg__ (the two cannot be combined): at 112, 8192 registers stay free for one such block
// (qwen3-30b-a3b batch 1 -1.1% on an H100, bench/RESULTS.md).
#if HP_CUDA_MOE_FUSED_MAX_REGS > 0
#define HP_MOE_FUSED_BOUNDS __maxnreg__(HP_CUDA_MOE_FUSED_MAX_REGS)
#else
#define HP_MOE_FUSED_BOUNDS __launch_bounds__(kFusedWarps * 32, 1)
#endif
template <int PER_LANE, bool SPLIT, bool MMA, bool DEFAULT_HANDOFF>
__global__ void HP_MOE_FUSED_BOUNDS moe_fused_single_kernel(const __grid_constant__ FusedParams p) {
    constexpr int U = kFusedUnroll, DU = kFusedDownUnroll, W = kFusedWarps;
    const bool tagged = DEFAULT_HANDOFF || p.logit_tags, tables_shared = DEFAULT_HANDOFF || p.tables_shared;
    // moe_fused_act_tags (plan_fused gives DEFAULT_HANDOFF only with p.act_tags when it is compiled in).
    constexpr bool kActTagsCompiled = kFusedActTags && MMA && !SPLIT;
    const bool act_tagged = kActTagsCompiled && (DEFAULT_HANDOFF || (tagged && p.act_tags));
    extern __shared__ __align__(128) unsigned char fused_shared[];
    __shared__ SingleRoute route_s;
    __shared__ const __nv_bfloat16 *gate_s[kMaxSingleExperts], *up_s[kMaxSingleExperts], *down_s[kMaxSingleExperts];
    __shared__ float inv_rms_s;
    __shared__ uint32_t tag_s, act_tag_s;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_warp = int(gridDim.x) * W, gw = int(blockIdx.x) * W + warp;
    const int D = p.d_model, F = p.d_ff, k = p.k, n_expert = p.n_expert;
    const int n_chunk = D / 8, n_chunk_f = F / 8, n_tile = (D + kTileRows - 1) / kTileRows;
    const FusedLayout layout = fused_layout(D, F, k, n_expert, p.stage_down, SPLIT ? p.split_rows : 0, MMA, tables_shared, act_tagged);
    auto *h_s = reinterpret_cast<__nv_bfloat16 *>(fused_shared + layout.h);
    auto *act_s = reinterpret_cast<__nv_bfloat16 *>(fused_shared + layout.act);
    auto *logits_s = reinterpret_cast<float *>(fused_shared + layout.logits);
    auto *partial_s = reinterpret_cast<float *>(fused_shared + layout.partial);
    auto *down_bar = reinterpret_cast<uint64_t *>(fused_shared + layout.bar);
    auto *down_stage = reinterpret_cast<__nv_bfloat16 *>(fused_shared + layout.down);
    auto *tables_s = reinterpret_cast<const __nv_bfloat16 **>(fused_shared + layout.tables);
    const bool staged = !SPLIT && !MMA && p.stage_down && int(blockIdx.x) < n_tile;  // this block's first tile comes by bulk copies
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto trace = [&](int point) {
        if (HP_CUDA_MOE_FUSED_TRACE && p.trace && threadIdx.x == 0) p.trace[blockIdx.x * kFusedTracePoints + point] = hp_cuda_gemv::global_timer();
    };
    trace(0);

    // Router: the first row's first loads before the previous kernel is done.
    uint4 wr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = lane + 32 * u;
        wr[u] = gw < n_expert && c < n_chunk ? hp_cuda_gemv::load_stream(p.router + int64_t(gw) * D + c * 8) : zero;
    }
    if (threadIdx.x == 0 && staged) {
        hp_cuda_gemv::mbarrier_init(down_bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (tables_shared) {  // the tables are the plugin's, written at create: not the previous kernel's output
        for (int i = threadIdx.x; i < 3 * n_expert; i += W * 32) {
            const int which = i / n_expert, e = i - which * n_expert;
            tables_s[i] = (which == 0 ? p.gate : which == 1 ? p.up : p.down)[e];
        }
    }
    hp_cuda_gemv::wait_for_previous_grid();
    hp_cuda_gemv::launch_dependents();
    trace(1);
    if (threadIdx.x == (W > 1 ? 32 : 0) && tagged) {  // warp 1: warp 0 reads x_sum_sq meanwhile
        const unsigned long long launch = fused_launch_index(p.barrier);
        tag_s = fused_logit_tag(launch);
        if constexpr (kActTagsCompiled) act_tag_s = fused_act_tag(launch);
    }
    if (warp == 0) {
        const float inv_rms = p.x_sum_sq ? hp_cuda_gemv::warp_inv_rms(p.x_sum_sq, p.n_sum_sq, D, p.norm_eps) : 1.0f;
        if (lane == 0) inv_rms_s = inv_rms;
    }
    for (int i = threadIdx.x; i < n_chunk; i += W * 32) reinterpret_cast<uint4 *>(h_s)[i] = reinterpret_cast<const uint4 *>(p.h)[i];
    __syncthreads();
    const float inv_rms = inv_rms_s;
    const uint32_t tag = tagged ? tag_s : 0, act_tag = kActTagsCompiled && tagged ? act_tag_s : 0;
    for (int e = gw; e < n_expert; e += n_warp) {
        float dot = 0.0f;
        for (int c0 = 0; c0 < n_chunk; c0 += 32 * U) {
            if (e != gw || c0 != 0) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int c = c0 + lane + 32 * u;
                    wr[u] = c < n_chunk ? hp_cuda_gemv::load_stream(p.router + int64_t(e) * D + c * 8) : zero;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = c0 + lane + 32 * u;
                if (c < n_chunk) dot = hp_cuda_gemv::dot_chunk(dot, wr[u], reinterpret_cast<const uint4 *>(h_s)[c]);
            }
        }
        for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        if (lane == 0) {
            p.logits[e] = dot * inv_rms;
            if (tagged) put_tagged_logit(p.logit_tags, e, tag, dot * inv_rms);
        }
    }
    if (HP_CUDA_MOE_FUSED_TRACE) __syncthreads();
    trace(2);
    if (!tagged) fused_grid_sync(p.barrier);

    // Route: every block from the same logits with the same arithmetic.
    if (warp == 0) {
        if (tagged) {
            take_tagged_logits<PER_LANE>(p.logit_tags, n_expert, tag, logits_s);
        } else {
            for (int e = lane; e < n_expert; e += 32) logits_s[e] = __ldcg(p.logits + e);
            __syncwarp();
        }
        trace(3);
        route_single<PER_LANE>(logits_s, n_expert, k, p.norm_topk_prob, route_s);
        for (int a = lane; a < k; a += 32) {
            const int expert = route_s.expert[a];
            gate_s[a] = tables_shared ? tables_s[expert] : p.gate[expert];
            up_s[a] = tables_shared ? tables_s[n_expert + expert] : p.up[expert];
            down_s[a] = tables_shared ? tables_s[2 * n_expert + expert] : p.down[expert];
        }
        __syncwarp();
        if (lane == 0 && staged) {  // the first tile's down rows of the k experts, streamed during gate/up
            const int rows = min(kTileRows, D - int(blockIdx.x) * kTileRows);
            const uint32_t bytes = uint32_t(rows) * uint32_t(F) * 2u;
            hp_cuda_gemv::mbarrier_arrive_expect_tx(down_bar, uint32_t(k) * bytes);
            for (int a = 0; a < k; ++a) {
                hp_cuda_gemv::bulk_copy(down_stage + int64_t(a) * kTileRows * F, down_s[a] + int64_t(blockIdx.x) * kTileRows * F, bytes, down_bar);
            }
        }
        if (blockIdx.x == 0) write_single_routing(route_s, k, p.routing, p.expert_counts, p.x_sum_sq != nullptr, inv_rms);
    }
    __syncthreads();
    trace(4);

    // Gate/up: one row of gate and of up per item, a warp's whole row in flight; the grid's warps
    // round-robin over the items (split down: the block's warps over its own items, act to shared memory).
    const int split_first = SPLIT ? min(int(blockIdx.x) * p.split_rows, k * F) : 0;
    const int split_end = SPLIT ? min(split_first + p.split_rows, k * F) : 0;
    // moe_fused_dynamic_items (with p.items): item gw first, then items n_warp + c for the claims c = 0, 1,
    // ... in claim order, so every item is taken exactly once. The next claim goes out before this item's
    // rows and its result is read after them: the atomic's round trip hides behind the loads.
    const bool dynamic = kFusedDynamicItems && !SPLIT && p.items;  // a constant false with the knob off
    for (int i = SPLIT ? split_first + warp : gw, next = 0; i < (SPLIT ? split_end : k * F); i = next) {
        int claimed = 0;
        if (dynamic && lane == 0) claimed = atomicAdd(p.items, 1);
        const int a = i / F, j = i - a * F;
        const __nv_bfloat16 *g_row = gate_s[a] + int64_t(j) * D, *u_row = up_s[a] + int64_t(j) * D;
        float g = 0.0f, u_sum = 0.0f;
        for (int c0 = 0; c0 < n_chunk; c0 += 32 * U) {
            uint4 wg[U], wu[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = c0 + lane + 32 * u;
                wg[u] = c < n_chunk ? hp_cuda_gemv::load_stream(g_row + c * 8) : zero;
                wu[u] = c < n_chunk ? hp_cuda_gemv::load_stream(u_row + c * 8) : zero;
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = c0 + lane + 32 * u;
                if (c >= n_chunk) break;
                const uint4 xv = reinterpret_cast<const uint4 *>(h_s)[c];
                g = hp_cuda_gemv::dot_chunk(g, wg[u], xv);
                u_sum = hp_cuda_gemv::dot_chunk(u_sum, wu[u], xv);
            }
        }
        if (act_tagged) {  // (a constant false where the knob or the form does not compile it in)
            silu_act_to(g, u_sum, inv_rms, route_s.weight[a], [&](__nv_bfloat16 value) { put_tagged_act(p.act_tags + i, act_tag, value); });
        } else {
            store_silu_act(g, u_sum, inv_rms, route_s.weight[a], SPLIT ? act_s + (i - split_first) : p.act + i);
        }
        next = dynamic ? n_warp + __shfl_sync(0xffffffffu, claimed, 0) : i + (SPLIT ? W : n_warp);
    }
    if constexpr (SPLIT) {
        split_down(p, act_s, partial_s, down_s, split_first, split_end, trace);
        return;
    }

    // Down: the tile's pairs (expert a, row r), pair = a * 16 + r, warp w taking pairs w, w + W, ...;
    // a lane's units walk those pairs in order, chunks lane + 32 m of each row (cpl per row).
    // MMA (moe_fused_down_mma): units (expert a, step s) of 32 inputs over the tile's 16 rows, warp w
    // taking units w, w + W, ...; lane (g, q) loads chunk 4 s + q of rows g and g + 8 (rows past
    // d_model clamped to the last, chunks past d_ff clamped and multiplied by zeros) as the A fragments
    // of two m16n8k16 products whose B column 0 is act's chunk (lanes 0..3; the other columns zero),
    // so each warp's accumulator holds its share of the tile's 16 sums over every expert.
    const int n_pair = k * kTileRows;
    const int cpl = (n_chunk_f + 31) / 32;
    const int g = lane / 4, q = lane % 4, n_step_e = (n_chunk_f + 3) / 4, n_mma_unit = k * n_step_e;
    const int n_unit = MMA ? (warp < n_mma_unit ? (n_mma_unit - warp + W - 1) / W : 0) : (warp < n_pair ? (n_pair - warp + W - 1) / W : 0) * cpl;
    constexpr int kRound = MMA ? DU / 2 : DU;  // units per round of loads (an MMA unit is two loads)
    static_assert(kRound >= 1, "moe_fused_down_mma needs moe_fused_down_unroll >= 2");
    uint4 wd[DU];
    int act_chunk[MMA ? kRound : 1];  // MMA: the unit's chunk of act, -1 past d_ff
    auto load_units = [&](int tile, int m0) {
        if constexpr (MMA) {
            const int64_t lo = min(tile * kTileRows + g, D - 1), hi = min(tile * kTileRows + g + 8, D - 1);
#pragma unroll
            for (int u = 0; u < kRound; ++u) {
                const int m = m0 + u, unit = min(warp + W * m, n_mma_unit - 1);  // clamped: a < k even where off
                const int a = unit / n_step_e, c = (unit - a * n_step_e) * 4 + q;
                const bool on = m < n_unit;
                const int64_t col = int64_t(min(c, n_chunk_f - 1)) * 8;
                wd[2 * u] = on ? hp_cuda_gemv::load_stream(down_s[a] + lo * F + col) : zero;
                wd[2 * u + 1] = on ? hp_cuda_gemv::load_stream(down_s[a] + hi * F + col) : zero;
                act_chunk[u] = on && c < n_chunk_f ? a * n_chunk_f + c : -1;
            }
        } else {
#pragma unroll
            for (int u = 0; u < DU; ++u) {
                const int m = m0 + u, pi = m / cpl, c = lane + 32 * (m - pi * cpl);
                const int pair = warp + W * pi, a = pair / kTileRows, row = tile * kTileRows + pair % kTileRows;
                wd[u] = m < n_unit && c < n_chunk_f && row < D ? hp_cuda_gemv::load_stream(down_s[a] + int64_t(row) * F + c * 8) : zero;
            }
        }
    };
    if (HP_CUDA_MOE_FUSED_TRACE) __syncthreads();
    trace(5);
    // The first tile's first loads before the barrier (the weights do not depend on act); warp 0's
    // after thread 0 has arrived, so that its release does not wait for them.
    const bool first_loads = int(blockIdx.x) < n_tile && !staged;
    if (first_loads && warp != 0) load_units(blockIdx.x, 0);
    // With act_tagged the block still arrives, once a launch, so that the next launch's tag is new, but
    // by a relaxed add that orders nothing (the next launch reads the counter after this grid has
    // ended) and does not wait: each warp polls the act words of its units instead. (A release
    // arrival holds thread 0's warp until the memory ops queued before it are done: ~5 us a layer
    // behind the grid's first down loads, in the trace.)
    // Without barrier 2, what keeps a block's tile writes (x, and norm_out's h and sum_sq, which may be
    // the buffers p.h and p.x_sum_sq every block read at its start) from reaching a block that has not
    // read them yet: a block writes its tile only after its units have seen every act word of the
    // launch (its units cover every expert and column), and every block whose h or 1/rms goes into
    // anything (a router row: the logits every block waits for; a gate/up row: an act word) made
    // that value from its reads, so the reads were done before the word could be seen. A block with
    // neither uses its copy of h and 1/rms for nothing.
    unsigned long long target = 0;
    if (act_tagged) {
        if (threadIdx.x == 0) asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(p.barrier) : "memory");
    } else {
        target = fused_grid_arrive(p.barrier);
    }
    if (first_loads && warp == 0) load_units(blockIdx.x, 0);
    if (!act_tagged) {
        fused_grid_wait(p.barrier, target);
        // Every warp's claims came back before its block arrived: the counter is free for the next launch.
        if (dynamic && blockIdx.x == 0 && threadIdx.x == 0) *p.items = 0;
        trace(6);
        for (int i = threadIdx.x; i < k * n_chunk_f; i += W * 32) reinterpret_cast<uint4 *>(act_s)[i] = __ldcg(reinterpret_cast<const uint4 *>(p.act) + i);
        __syncthreads();
    } else {
        trace(6);
    }
    trace(7);
    auto *act_stage = reinterpret_cast<__nv_bfloat16 *>(fused_shared + layout.act_stage) + warp * kFusedMmaRound * 32;  // act_tagged: this warp's
    for (int tile = blockIdx.x; tile < n_tile; tile += gridDim.x) {
        const bool from_stage = staged && tile == int(blockIdx.x);
        if (from_stage) {  // the rows are in shared memory: pair by pair
            hp_cuda_gemv::mbarrier_wait(down_bar, 0);
            for (int pair = warp; pair < n_pair; pair += W) {
                const int a = pair / kTileRows, row = tile * kTileRows + pair % kTileRows;
                float dot = 0.0f;
                if (row < D) {
                    const auto *w_row = reinterpret_cast<const uint4 *>(down_stage + int64_t(pair) * F);
                    const auto *act_row = reinterpret_cast<const uint4 *>(act_s + int64_t(a) * F);
                    for (int c = lane; c < n_chunk_f; c += 32) dot = hp_cuda_gemv::dot_chunk(dot, w_row[c], act_row[c]);
                }
                for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
                if (lane == 0) partial_s[pair] = dot;
            }
        }
        float acc = 0.0f, acc4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int m0 = 0; m0 < (from_stage ? 0 : n_unit); m0 += kRound) {
            if (m0 > 0 || tile != int(blockIdx.x)) load_units(tile, m0);
            if constexpr (MMA) {
                if (act_tagged) {
                    int unit[kFusedMmaRound];
#pragma unroll
                    for (int u = 0; u < kFusedMmaRound; ++u) unit[u] = m0 + u < n_unit ? warp + W * (m0 + u) : -1;
                    take_tagged_act(p.act_tags, unit, n_step_e, F, act_tag, act_stage);
                }
#pragma unroll
                for (int u = 0; u < kRound; ++u) {
                    if (m0 + u >= n_unit) break;  // warp-uniform
                    const uint4 b = g == 0 && act_chunk[u] >= 0
                                        ? (act_tagged ? reinterpret_cast<const uint4 *>(act_stage)[u * 4 + q] : reinterpret_cast<const uint4 *>(act_s)[act_chunk[u]])
                                        : zero;
                    hp_cuda_gemv::mma_16816(acc4, wd[2 * u].x, wd[2 * u + 1].x, wd[2 * u].y, wd[2 * u + 1].y, b.x, b.y);
                    hp_cuda_gemv::mma_16816(acc4, wd[2 * u].z, wd[2 * u + 1].z, wd[2 * u].w, wd[2 * u + 1].w, b.z, b.w);
                }
            } else {
#pragma unroll
                for (int u = 0; u < DU; ++u) {
                    const int m = m0 + u;
                    if (m >= n_unit) break;  // warp-uniform
                    const int pi = m / cpl, c = lane + 32 * (m - pi * cpl), pair = warp + W * pi, a = pair / kTileRows;
                    if (c < n_chunk_f) acc = hp_cuda_gemv::dot_chunk(acc, wd[u], reinterpret_cast<const uint4 *>(act_s + int64_t(a) * F)[c]);
                    if (m - pi * cpl == cpl - 1) {  // the pair's last unit (warp-uniform)
                        for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
                        if (lane == 0) partial_s[pair] = acc;
                        acc = 0.0f;
                    }
                }
            }
        }
        if (MMA && q == 0) {  // column 0 of the warp's accumulator: rows g and g + 8
            partial_s[warp * kTileRows + g] = acc4[0];
            partial_s[warp * kTileRows + g + 8] = acc4[2];
        }
        if (tile == int(blockIdx.x)) trace(8);
        __syncthreads();
        if (warp == 0) {  // the tile's rows: lanes 0..15 (16..31 add zeros to the shuffles)
            float sum = 0.0f;
            for (int a = 0; a < (MMA ? W : k); ++a) sum += partial_s[a * kTileRows + lane % kTileRows];
            accumulate_tile(p.x, p.norm_out, tile * kTileRows, D, sum);
        }
        __syncthreads();  // partial_s is rewritten by the next tile
    }
    if (int(blockIdx.x) >= n_tile) trace(8);
    trace(9);
}

// Whether the fused kernel takes a one-token MoE FFN of these shapes and buffers.
inline bool fused_fits(const FusedParams &p, bool experts_aligned) {
    using hp_cuda_gemv::aligned16;
    return experts_aligned && p.d_model % 8 == 0 && p.d_ff % 8 == 0 && p.k >= 1 && p.k <= kMaxSingleExperts && p.k <= p.n_expert &&
           p.n_expert <= kMaxExpert && aligned16(p.router) && aligned16(p.h) && aligned16(p.act) && p.barrier &&
           fused_layout(p.d_model, p.d_ff, p.k, p.n_expert, false, 0, true, p.tables_shared, kFusedActTags && p.act_tags).total <= size_t(kFusedMaxShared);
}

// How a fused launch runs: the kernel for the model's logits per lane and down form (split down
// where asked and p.partial is given; staged where asked and the rows fit: qwen3-30b-a3b's 192 KB
// of 212), the items a block takes of a split down, its dynamic shared memory.
struct FusedLaunch {
    void (*kernel)(FusedParams) = nullptr;
    bool stage_down = false;
    int split_rows = 0;
    size_t shared = 0;
};
template <bool SPLIT, bool MMA, bool DEFAULT_HANDOFF>
inline void (*fused_kernel_of(int per_lane))(FusedParams) {
    return per_lane <= 1   ? moe_fused_single_kernel<1, SPLIT, MMA, DEFAULT_HANDOFF>
           : per_lane <= 2 ? moe_fused_single_kernel<2, SPLIT, MMA, DEFAULT_HANDOFF>
           : per_lane <= 4 ? moe_fused_single_kernel<4, SPLIT, MMA, DEFAULT_HANDOFF>
           : per_lane <= 8 ? moe_fused_single_kernel<8, SPLIT, MMA, DEFAULT_HANDOFF>
                           : moe_fused_single_kernel<kMaxExpert / 32, SPLIT, MMA, DEFAULT_HANDOFF>;
}
template <bool SPLIT, bool MMA>
inline void (*fused_kernel(int per_lane, bool default_handoff))(FusedParams) {
    return default_handoff ? fused_kernel_of<SPLIT, MMA, true>(per_lane) : fused_kernel_of<SPLIT, MMA, false>(per_lane);
}
inline FusedLaunch plan_fused(const FusedParams &p, FusedDown down) {
    const int per_lane = (p.n_expert + 31) / 32;
    // (with moe_fused_act_tags compiled in, the DEFAULT_HANDOFF kernel of the tensor-core down takes act tags)
    const bool default_handoff = p.logit_tags != nullptr && p.tables_shared && (!kFusedActTags || p.act_tags);
    const bool act_tags = kFusedActTags && down == FusedDown::mma && p.logit_tags && p.act_tags;
    FusedLaunch l;
    if (down == FusedDown::split && p.partial) {
        l.kernel = fused_kernel<true, false>(per_lane, default_handoff);
        l.split_rows = fused_split_rows(p.k, p.d_ff, hp_cuda_gemv::device_sm_count());
    } else {
        l.kernel = down == FusedDown::mma ? fused_kernel<false, true>(per_lane, default_handoff)
                                          : fused_kernel<false, false>(per_lane, default_handoff);
        l.stage_down = down == FusedDown::staged && fused_layout(p.d_model, p.d_ff, p.k, p.n_expert, true, 0, false, p.tables_shared).total <= size_t(kFusedMaxShared);
    }
    l.shared = fused_layout(p.d_model, p.d_ff, p.k, p.n_expert, l.stage_down, l.split_rows, down == FusedDown::mma, p.tables_shared, act_tags).total;
    return l;
}

// Whether every SM can hold a block of the fused launch (the grid barriers need the whole grid
// resident, and a cooperative launch that cannot be fails): opts the kernel in to the launch's own
// shared memory (a larger maximum measured slower in the step) and asks the occupancy.
inline bool fused_resident(const FusedParams &p, FusedDown down = kFusedDownKnob) {
    const FusedLaunch l = plan_fused(p, down);
    static thread_local const void *last_kernel = nullptr;  // the answer for the last (kernel, size, device): every layer asks
    static thread_local size_t last_shared = 0;
    static thread_local int last_device = -1;
    static thread_local bool last_answer = false;
    int device = 0;
    cudaGetDevice(&device);
    if (reinterpret_cast<const void *>(l.kernel) == last_kernel && l.shared == last_shared && device == last_device) return last_answer;
    int per_sm = 0;
    last_answer = cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.shared)) == cudaSuccess &&
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, kFusedWarps * 32, l.shared) == cudaSuccess && per_sm >= 1;
    last_kernel = reinterpret_cast<const void *>(l.kernel);
    last_shared = l.shared;
    last_device = device;
    return last_answer;
}

// Launches the fused kernel (the caller checked fused_fits and fused_resident with the same
// down form): one block per SM, cooperative and, with HP_CUDA_PDL, a programmatic dependent of the
// previous kernel. Every launch on one barrier counter must have the same grid (the device's SMs).
// Returns the launch's error.
inline cudaError_t launch_fused(FusedParams p, cudaStream_t stream, FusedDown down = kFusedDownKnob) {
    const FusedLaunch l = plan_fused(p, down);
    p.stage_down = l.stage_down;
    p.split_rows = l.split_rows;
    return hp_cuda_gemv::launch_ex(l.kernel, dim3(unsigned(hp_cuda_gemv::device_sm_count())), dim3(kFusedWarps * 32), l.shared, 0, true, stream, p);
}

}  // namespace hp_cuda_moe
