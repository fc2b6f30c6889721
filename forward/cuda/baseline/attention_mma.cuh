// Tensor-core flash-decoding attention of the CUDA baseline (knob attn_kernel = 2): the kernel of
// attention.cuh with q.k and p.V on mma.sync m16n8k16 (16-bit inputs, float32 accumulation) instead
// of CUDA-core dot products. Same grid (kv head g, token t, split s), split count, partials and
// last-block reduction (fd_block_finish); 16-bit KV, d_head 64 or 128, group <= 8.
//
// A warp step is 16 positions (one 16-token paged block; 4 KB of KV at d_head 64): S = q K^T as
// 2 n8 tiles x d_head / 16 k-chunks, O += P V as d_head / 8 n8 tiles x 1 k-chunk. The MMA's M side
// is the GQA group: rows 0..7 hold up to 8 query heads and rows 8..15, padding otherwise, hold the
// low half of a two-term split x = hi + lo (both 16-bit) of q in S and of the probabilities in O.
// Rows h and h + 8 summed give the products with float32 q and p to about 2^-16, so only K and V
// are rounded (they are 16-bit already): the accuracy of the CUDA-core kernel.
//
// Fragments come straight from global memory in the layout the MMA wants, using that a dot product
// does not care about the order of its terms. Thread (r = lane / 4, c = lane % 4) of a warp:
// - S: B column r of the two n8 tiles is position r and 8 + r of the step; the thread loads the
//   16-byte chunks c, c + 4, ... of those K rows (64-byte runs per row across the quad); word i of
//   its k-th chunk is the B register i % 2 of k-chunk 2 k + i / 2, and q's A registers are the
//   same d's of head r. The accumulator holds head r at positions 2c, 2c + 1, 8 + 2c, 9 + 2c.
// - O: P's A fragment is that accumulator re-packed (k-slot = position), so the thread loads V rows
//   2c, 2c + 1, 8 + 2c, 9 + 2c at chunks r, r + 8, ...; byte permutes pair two rows' elements into
//   a B register, and output column n of n8 tile 8 k + e is d = 8 (n + 8 k) + e.
//
// Loads: the PREFETCH variant (small steps) holds the next step's chunks in registers; the other,
// held to 128 registers, loads a step and then multiplies it, so each warp has one step (4 KB at
// d_head 64) in flight: a warp of a batch-32 step walks its 8 steps as 8 dependent DRAM round trips.
// Knob attn_mma_prefetch_min_tokens holds the PREFETCH variant to 128 registers too (d_head 64,
// group <= 4; no spills) and runs it for steps of that many tokens and more (mma_min_blocks).
// With knob attn_mma_ring (d_head 64; attn_mma_ring_128 for 128) at R >= 2 that variant copies the
// same chunks with cp.async into a ring of R steps per warp in shared memory instead, R - 1 steps
// ahead of the one it multiplies; each thread reads back only the chunks it copied itself, so no
// barrier is needed, and a stage is refilled one iteration after it was read (its values have been
// used by then). Knob attn_mma_ring_early also issues the ring's first steps before
// griddepcontrol.wait where the token is alone in its sequence and those steps predate it.
#pragma once

#include "attention.cuh"

namespace hp_cuda_baseline {

constexpr int kMmaStep = 16;  // positions per warp step of decode_attention_mma_kernel

// 16-byte K/V chunks a thread loads per warp step: 2 K rows x D / 32, 4 V rows x D / 64.
template <int D>
__host__ __device__ constexpr int mma_chunks() { return 2 * (D / 32) + 4 * (D / 64); }
// Steps of the shared-memory ring of the variant without PREFETCH (knobs attn_mma_ring,
// attn_mma_ring_128); below 2: register loads.
// mma_ring_of: the same for a d_head known at run time (0 for sizes the kernel does not take).
__host__ __device__ constexpr int mma_ring_of(int d_head) {
    return d_head == 128 ? HP_CUDA_ATTN_MMA_RING_128 : d_head == 64 ? HP_CUDA_ATTN_MMA_RING : 0;
}
template <int D>
__host__ __device__ constexpr int mma_ring() { return mma_ring_of(D); }
// Dynamic shared memory of a launch of decode_attention_mma_kernel<.., D, .., PREFETCH, RING, .., W>.
template <int D, bool PREFETCH, int RING = mma_ring<D>(), int W = kFdWarps>
__host__ __device__ constexpr size_t mma_shared_bytes() {
    return !PREFETCH && RING >= 2 ? size_t(RING) * W * 32 * mma_chunks<D>() * 16 : 0;
}
// Whether a block of decode_attention_mma_kernel<.., D, G, PREFETCH, RING, .., CLUSTER, W> fits the 227 KB
// of shared memory a block may have: its ring, its state and the cluster's inbox.
template <int D, int G, bool PREFETCH, int RING, bool CLUSTER, int W>
__host__ __device__ constexpr bool mma_fits() {
    return mma_shared_bytes<D, PREFETCH, RING, W>() + sizeof(FdShared<D, G, W>) + (CLUSTER ? sizeof(FdClusterInbox<D, G>) : 0) <= 232448;
}

// Knob attn_mma_warps8: the kernel in blocks of kMmaWideWarps warps, the same warps per SM in half the
// blocks (fd_min_blocks), and so with half the splits (mma_wide_target_blocks). At 1 only where that
// leaves one split a (token, kv head) and blocks of kFdWarps would need more, at d_head 64 and groups up
// to 4 (both forms held to 128 registers; the only shapes measured): no partials and no last-block
// reduction, at full occupancy (llama-3.2-1b with 1k-token KV: 32-63 tokens; with attn_mma_one_wave,
// 23-33). Elsewhere the larger blocks lost: at two splits, or where a wave of 4-warp blocks becomes two
// of 8-warp ones. At 2 always.
constexpr int kMmaWideWarps = 8;
inline int mma_wide_target_blocks() { return HP_CUDA_ATTN_FD_TARGET_BLOCKS * kFdWarps / kMmaWideWarps; }
// Whether every 8-warp form the plugin may launch at d_head D fits a block (the largest: a group of 8,
// the build's ring, in a cluster where attn_mma_cluster compiles those in); where not (e.g.
// attn_mma_ring_128 3 with attn_mma_cluster), steps keep blocks of kFdWarps whatever attn_mma_warps8 says.
template <int D>
constexpr bool mma_wide_fits() {
    return mma_fits<D, 8, false, mma_ring<D>(), (HP_CUDA_ATTN_MMA_CLUSTER >= 2), kMmaWideWarps>();
}
// Whether a d_head's 8-warp forms are compiled in (attn_mma_warps8 on, and they fit).
constexpr bool mma_wide_compiled(int d_head) {
    if (HP_CUDA_ATTN_MMA_WARPS8 == 0 || kMmaWideWarps == kFdWarps) return false;
    return d_head == 64 ? mma_wide_fits<64>() : d_head == 128 ? mma_wide_fits<128>() : false;
}
// The shapes attn_mma_one_wave and attn_mma_warps8 1 take: d_head 64 and groups up to 4, where both block
// sizes are held to 128 registers (blocks per SM pinned); the only shapes measured.
inline bool mma_pinned(int d_head, int group) { return d_head == 64 && group <= 4; }

// The blocks of a step on the tensor-core kernel: warps per block, splits per (token, kv head).
struct MmaBlocks {
    int warps = kFdWarps;
    int n_split = 1;
};
// Blocks one wave of the device holds (SMs x blocks per SM) in each block size, for attn_mma_one_wave;
// 0 where not known.
struct MmaWave {
    int blocks = 0;       // of kFdWarps warps
    int wide_blocks = 0;  // of kMmaWideWarps warps
};

// Knob attn_mma_one_wave: at the pinned shapes (mma_pinned), a step's blocks fit one wave of the device
// (`wave`, from the occupancy calculator: mma_wave): splits are cut to the most whose blocks one wave
// holds, and 8-warp blocks with one split (attn_mma_warps8 1) are taken where they fit one wave and give
// as many warps as the 4-warp blocks (those have two splits), so fewer splits win the tie. Blocks past a
// wave start only when the first blocks end, and their steps lengthen the launch by a block's time:
// llama-3.2-1b with 1k-token KV on an H100 (528 4-warp blocks a wave) at 20 tokens took 4 splits, 640
// blocks (3 splits measured 5.5% faster a step), at 36-56 tokens one split of 8-warp blocks, 288-448 of
// them against 264 a wave (one split of 4-warp blocks, one wave: 2-7% faster). Off, or at other shapes:
// attn_fd_target_blocks' split count, and attn_mma_warps8's rule by its halved target.
// Arguments as decode_attention_splits'.
inline MmaBlocks mma_blocks(int n_token, int n_head_kv, int d_head, int group, int max_positions, int max_split, MmaWave wave) {
    MmaBlocks four{kFdWarps, decode_attention_splits(n_token, n_head_kv, d_head, max_positions, max_split)};
    const bool wide = mma_wide_compiled(d_head);
    auto wide_splits = [&] {
        return decode_attention_splits(n_token, n_head_kv, d_head, max_positions, max_split, kMmaWideWarps, mma_wide_target_blocks());
    };
    if (wide && HP_CUDA_ATTN_MMA_WARPS8 == 2) return {kMmaWideWarps, wide_splits()};
    if (!mma_pinned(d_head, group)) return four;
    if (HP_CUDA_ATTN_MMA_ONE_WAVE && wave.blocks > 0) {
        const int pairs = n_token * n_head_kv, fit = wave.blocks / pairs;
        four.n_split = four.n_split < fit ? four.n_split : fit > 1 ? fit : 1;
        if (wide && four.n_split == 2 && pairs <= wave.wide_blocks) return {kMmaWideWarps, 1};
        return four;
    }
    if (wide && four.n_split > 1 && wide_splits() == 1) return {kMmaWideWarps, 1};
    return four;
}

// Knob attn_mma_prefetch_min_tokens: on, the PREFETCH variant at group <= 4 and d_head 64 asks for
// attn_fd_min_blocks blocks per SM like the other (at 4: 128 registers, no spills, ptxas -v; 140
// unbounded, which leaves 3 blocks per SM and a batch-32 launch of 512 blocks in two waves), so that
// steps of that many tokens can keep two warp steps (8 KB) a warp in flight at full occupancy.
// mma_prefetch_held: whether the knob holds the PREFETCH variant of these template arguments (and so
// larger steps may take it: forward.cu).
template <int D, int G>
__host__ __device__ constexpr bool mma_prefetch_held() { return HP_CUDA_ATTN_MMA_PREFETCH_MIN_TOKENS > 0 && D == 64 && G <= 4; }
// In blocks of W warps: attn_fd_min_blocks blocks of attn_fd_warps warps (fd_min_blocks), the same cap.
template <int D, int G, bool PREFETCH, int W = kFdWarps>
__host__ __device__ constexpr int mma_min_blocks() {
    return (PREFETCH && !mma_prefetch_held<D, G>()) || G > 4 || D > 64 ? 1 : fd_min_blocks(W);
}

template <hp_dtype KV>
__device__ inline float round16(float x) {
    if constexpr (KV == HP_DTYPE_BF16)
        return __bfloat162float(__float2bfloat16_rn(x));
    else
        return __half2float(__float2half_rn(x));
}

// (x0, x1) = hi + lo, each a register of two 16-bit values.
template <hp_dtype KV>
__device__ inline void split16x2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const float h0 = round16<KV>(x0), h1 = round16<KV>(x1);
    hi = pack16x2<KV>(h0, h1);
    lo = pack16x2<KV>(x0 - h0, x1 - h1);
}

// c += a b: m16n8k16, a row-major 16x16, b column-major 16x8, float32 accumulators.
template <hp_dtype KV>
__device__ inline void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (KV == HP_DTYPE_BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

__device__ inline uint32_t word_of(const uint4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Arguments and outputs as decode_attention_kernel's; PREFETCH and the blocks-per-SM bound too.
// RING, RING_EARLY: knobs attn_mma_ring(_128) and attn_mma_ring_early (template arguments so that
// test_cuda_attention runs every form whatever the build's knobs). CLUSTER (knob attn_mma_cluster):
// the splits of (t, g) are one thread-block cluster, grid (split, kv head, token), and hand each
// other their partial results through distributed shared memory as the CUDA-core kernel's clusters
// do (fd_block_finish). W: warps per block (kFdWarps, or kMmaWideWarps: knob attn_mma_warps8).
template <hp_dtype KV, int D, int G, bool PREFETCH, int RING = mma_ring<D>(), bool RING_EARLY = HP_CUDA_ATTN_MMA_RING_EARLY,
          bool CLUSTER = false, int W = kFdWarps>
__global__ void __launch_bounds__(W * 32, mma_min_blocks<D, G, PREFETCH, W>())
    decode_attention_mma_kernel(DecodeAttentionParams p, const float *q, const int32_t *positions,
                                const int32_t *token_seq, const int32_t *block_tables,
                                const void *k_cache, const void *v_cache, float *partial,
                                int32_t *counters, __nv_bfloat16 *out) {
    static_assert(D == 64 || D == 128, "d_head 64 or 128");
    static_assert(G <= 8, "query heads in MMA rows 0..7");
    // Per thread: 16-byte chunks of a K row and of a V row; n8 tiles of the output.
    constexpr int kKChunks = D / 32, kVChunks = D / 64, kOTiles = D / 8;
    __shared__ FdShared<D, G, W> sh;
    fd_trace(p, 0);
    if constexpr (CLUSTER) fd_cluster_arrive_started();
    if (hp_cuda_gemv::kL2Prefetch) hp_cuda_gemv::prefetch_l2(p.prefetch, hp_cuda_gemv::linear_block(), hp_cuda_gemv::grid_blocks());
    const int g = CLUSTER ? blockIdx.y : blockIdx.x, t = CLUSTER ? blockIdx.z : blockIdx.y, split = CLUSTER ? blockIdx.x : blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int r = lane / 4, c = lane % 4;
    const int group = p.group, head0 = g * group;
    // As decode_attention_kernel: the step's inputs before the wait, and (PREFETCH variant) the
    // warp's first step of K/V rows too where the token is alone in its sequence and the step wholly
    // predates it (the other variant, held to 128 registers, lost 4% alone at batch 16 and 32 with it).
    const int length = positions[t] + 1;
    const int n_step = (length + kMmaStep - 1) / kMmaStep,
              split_steps = (n_step + p.n_split - 1) / p.n_split;
    const int step_begin = min(n_step, split * split_steps),
              step_end = min(n_step, step_begin + split_steps);
    const bool alone = fd_alone(p, t);
    const int32_t *table = alone ? block_tables + int64_t(t) * p.max_blocks : nullptr;
    const int64_t row_width = int64_t(p.n_head_kv) * D;
    const auto *k_base = static_cast<const uint16_t *>(k_cache) + int64_t(g) * D;
    const auto *v_base = static_cast<const uint16_t *>(v_cache) + int64_t(g) * D;
    // Rows of the step's 16 positions this thread reads.
    const int k_row[2] = {r, 8 + r}, v_row[4] = {2 * c, 2 * c + 1, 8 + 2 * c, 9 + 2 * c};

    // As decode_attention_kernel's load_step: one table entry per step when the step lies in one
    // paged block, else a look-up per row with rows past the sequence clamped to its last one.
    const bool step_in_block = p.block_tokens % kMmaStep == 0;
    auto load_step = [&](int step, uint4 k_raw[2][kKChunks], uint4 v_raw[4][kVChunks]) {
        const int first = step * kMmaStep;
        const int64_t step_row = step_in_block ? paged_row(p, table, first) * row_width : 0;
        auto row = [&](int i) {  // of position first + i
            return step_in_block ? step_row + i * row_width : paged_row(p, table, min(first + i, length - 1)) * row_width;
        };
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int k = 0; k < kKChunks; ++k) k_raw[j][k] = load_kv(k_base + row(k_row[j]) + 8 * (c + 4 * k));
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int k = 0; k < kVChunks; ++k) v_raw[j][k] = load_kv(v_base + row(v_row[j]) + 8 * (r + 8 * k));
    };
    // The ring (see the top): stage i of this warp holds this thread's kChunks chunks at
    // ring[((warp * R + i) * kChunks + chunk) * 32 + lane] (K chunks first, then V, in load_step's order).
    constexpr int R = RING, kChunks = mma_chunks<D>();
    constexpr bool kRing = !PREFETCH && R >= 2;
    static_assert(mma_fits<D, G, PREFETCH, RING, CLUSTER, W>(), "attn_mma_ring: the ring, the block's state and the cluster's inbox exceed 227 KB");
    extern __shared__ uint4 ring[];
    auto copy_step = [&](int step, int stage) {
        const int first = step * kMmaStep;
        const int64_t step_row = step_in_block ? paged_row(p, table, first) * row_width : 0;
        auto row = [&](int i) {
            return step_in_block ? step_row + i * row_width : paged_row(p, table, min(first + i, length - 1)) * row_width;
        };
        uint4 *at = ring + size_t(warp * R + stage) * kChunks * 32 + lane;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int k = 0; k < kKChunks; ++k) fd_cp_async16(at + (j * kKChunks + k) * 32, k_base + row(k_row[j]) + 8 * (c + 4 * k));
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int k = 0; k < kVChunks; ++k) fd_cp_async16(at + (2 * kKChunks + j * kVChunks + k) * 32, v_base + row(v_row[j]) + 8 * (r + 8 * k));
    };
    // The first R - 1 steps, one commit group each (empty past the split): before the wait with
    // attn_mma_ring_early where the token is alone and the last of them predates its position.
    int ring_next = step_begin + warp;  // the next step to copy
    auto ring_prologue = [&] {
#pragma unroll
        for (int i = 0; i < R - 1; ++i) {
            if (ring_next < step_end) copy_step(ring_next, i);
            hp_cuda_gemv::cp_async_commit();
            ring_next += W;
        }
    };
    const bool ring_early = kRing && RING_EARLY && alone &&
                            (min(step_begin + warp + (R - 2) * W, step_end - 1) + 1) * kMmaStep < length;
    if constexpr (kRing) {
        if (ring_early) ring_prologue();
    }
    uint4 k_next[2][kKChunks], v_next[4][kVChunks];
    const bool early = fd_early_step<PREFETCH>(alone, step_begin + warp, step_end, kMmaStep, length);
    if (early) load_step(step_begin + warp, k_next, v_next);
    hp_cuda_gemv::wait_for_previous_grid();  // q, the newest K/V row and token_seq are the previous kernels' output
    fd_trace(p, 1);
    if (!alone) table = block_tables + int64_t(token_seq[t]) * p.max_blocks;
    if constexpr (kRing) {
        if (!ring_early) ring_prologue();
    }
    int ring_stage = 0;  // the stage holding the step being multiplied

    // q of head r, pre-scaled, as A fragments of the d_head / 16 k-chunks (hi row r, lo row r + 8).
    uint32_t q_a[D / 16][4];
#pragma unroll
    for (int k = 0; k < kKChunks; ++k) {
        float x[8] = {};
        if (r < group) {
            const float *q_chunk = q + (int64_t(t) * p.n_head + head0 + r) * D + 8 * (c + 4 * k);
            const float4 lo4 = *reinterpret_cast<const float4 *>(q_chunk),
                         hi4 = *reinterpret_cast<const float4 *>(q_chunk + 4);
            const float loaded[8] = {lo4.x, lo4.y, lo4.z, lo4.w, hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) x[e] = loaded[e] * p.scale_log2;
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            split16x2<KV>(x[4 * i], x[4 * i + 1], q_a[2 * k + i][0], q_a[2 * k + i][1]);
            split16x2<KV>(x[4 * i + 2], x[4 * i + 3], q_a[2 * k + i][2], q_a[2 * k + i][3]);
        }
    }

    // Head r: running max (base 2, quad-uniform), this thread's share of the sum.
    float m = -INFINITY, l = 0.0f;
    float o[kOTiles][4];  // rows r (hi p) and r + 8 (lo p), columns 2c, 2c + 1 of each n8 tile
#pragma unroll
    for (int j = 0; j < kOTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    if (PREFETCH && !early && step_begin + warp < step_end) load_step(step_begin + warp, k_next, v_next);
    for (int step = step_begin + warp; step < step_end; step += W) {
        uint4 k_raw[2][kKChunks], v_raw[4][kVChunks];
        if constexpr (PREFETCH) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int k = 0; k < kKChunks; ++k) k_raw[j][k] = k_next[j][k];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int k = 0; k < kVChunks; ++k) v_raw[j][k] = v_next[j][k];
            }
            if (step + W < step_end) load_step(step + W, k_next, v_next);
        } else if constexpr (kRing) {
            hp_cuda_gemv::cp_async_wait<R - 2>();  // this thread's copies of this step have landed
            const uint4 *at = ring + size_t(warp * R + ring_stage) * kChunks * 32 + lane;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int k = 0; k < kKChunks; ++k) k_raw[j][k] = at[(j * kKChunks + k) * 32];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int k = 0; k < kVChunks; ++k) v_raw[j][k] = at[(2 * kKChunks + j * kVChunks + k) * 32];
            }
            // Refill the stage read in the previous iteration (its values are used by now).
            if (ring_next < step_end) copy_step(ring_next, (ring_stage + R - 1) % R);
            hp_cuda_gemv::cp_async_commit();
            ring_next += W;
            ring_stage = ring_stage + 1 == R ? 0 : ring_stage + 1;
        } else {
            load_step(step, k_raw, v_raw);
        }
        const int first = step * kMmaStep;
        // The sequence's last step: rows past it may hold anything (NaN).
        const bool last = first + kMmaStep > length;
        if (last) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int k = 0; k < kVChunks; ++k) {
                    if (first + v_row[j] >= length) v_raw[j][k] = make_uint4(0, 0, 0, 0);
                }
            }
        }
        float s_acc[2][4] = {};
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int k = 0; k < kKChunks; ++k) {
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    mma_16816<KV>(s_acc[n], q_a[2 * k + i], word_of(k_raw[n][k], 2 * i),
                                  word_of(k_raw[n][k], 2 * i + 1));
            }
        }
        // Head r at positions first + v_row[e]: hi row + lo row.
        float s[4] = {s_acc[0][0] + s_acc[0][2], s_acc[0][1] + s_acc[0][3],
                      s_acc[1][0] + s_acc[1][2], s_acc[1][1] + s_acc[1][3]};
        if (last) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (first + v_row[e] >= length) s[e] = -INFINITY;
            }
        }
        float step_max = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
        step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 1));
        step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 2));
        const float m_new = fmaxf(m, step_max);  // finite: a step holds at least one valid position
        const float alpha = exp2f(m - m_new);    // 0 on the first step (m = -inf)
        m = m_new;
        l *= alpha;
#pragma unroll
        for (int j = 0; j < kOTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) o[j][e] *= alpha;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[e] = exp2f(s[e] - m_new);  // 0 for dropped positions
            l += s[e];
        }
        uint32_t p_a[4];
        split16x2<KV>(s[0], s[1], p_a[0], p_a[1]);
        split16x2<KV>(s[2], s[3], p_a[2], p_a[3]);
#pragma unroll
        for (int k = 0; k < kVChunks; ++k) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t w0 = word_of(v_raw[0][k], i), w1 = word_of(v_raw[1][k], i);
                const uint32_t w2 = word_of(v_raw[2][k], i), w3 = word_of(v_raw[3][k], i);
                mma_16816<KV>(o[8 * k + 2 * i], p_a, __byte_perm(w0, w1, 0x5410),
                              __byte_perm(w2, w3, 0x5410));  // even d
                mma_16816<KV>(o[8 * k + 2 * i + 1], p_a, __byte_perm(w0, w1, 0x7632),
                              __byte_perm(w2, w3, 0x7632));  // odd d
            }
        }
    }
    if constexpr (kRing) hp_cuda_gemv::cp_async_wait<0>();  // only empty groups are left; none outlives the block
    fd_trace(p, 2);
    hp_cuda_gemv::launch_dependents();
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (r < G) {
#pragma unroll
        for (int k = 0; k < kVChunks; ++k) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float *tile = o[8 * k + e];
                sh.acc[warp][r][8 * (2 * c + 8 * k) + e] = tile[0] + tile[2];
                sh.acc[warp][r][8 * (2 * c + 1 + 8 * k) + e] = tile[1] + tile[3];
            }
        }
        if (c == 0) {
            sh.m[warp][r] = m;
            sh.l[warp][r] = l;
        }
    }
    fd_block_finish<D, G, W, CLUSTER>(p, t, g, split, sh, partial, counters, out);
    fd_trace(p, 6);
}

// The dynamic shared memory a launch of decode_attention_mma_kernel<KV, D, G, PREFETCH, ..> takes
// (its ring), with the kernel allowed that much beside its static shared memory (above 48 KB together
// a launch fails without the attribute); host code, before the launch.
template <hp_dtype KV, int D, int G, bool PREFETCH, int RING = mma_ring<D>(), bool RING_EARLY = HP_CUDA_ATTN_MMA_RING_EARLY,
          bool CLUSTER = false, int W = kFdWarps>
inline size_t mma_prepare_shared() {
    constexpr size_t bytes = mma_shared_bytes<D, PREFETCH, RING, W>();
    if (bytes > 0) {
        cudaFuncSetAttribute(decode_attention_mma_kernel<KV, D, G, PREFETCH, RING, RING_EARLY, CLUSTER, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(bytes));
    }
    return bytes;
}

// attn_mma_one_wave: the blocks at the pinned shapes (mma_pinned: the PREFETCH variant and the other
// held to the same 128 registers) that one wave of the current device holds, with the build's ring
// where `ring` (its shared memory may hold fewer blocks an SM), by the occupancy calculator. Asked
// once per process and form.
template <hp_dtype KV, int W>
int mma_wave_blocks(bool ring) {
    static int per_sm[2] = {-1, -1};
    int &known = per_sm[ring ? 1 : 0];
    if (known < 0) {
        auto ask = [&](auto ring_steps) {
            constexpr int R = decltype(ring_steps)::value;
            constexpr bool E = HP_CUDA_ATTN_MMA_RING_EARLY;
            const size_t bytes = mma_prepare_shared<KV, 64, 4, false, R, E, false, W>();
            int blocks = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decode_attention_mma_kernel<KV, 64, 4, false, R, E, false, W>, W * 32, bytes) !=
                cudaSuccess) {
                cudaGetLastError();
                blocks = 0;
            }
            return blocks;
        };
        if constexpr (mma_ring<64>() >= 2) known = ring ? ask(std::integral_constant<int, mma_ring<64>()>{}) : ask(std::integral_constant<int, 0>{});
        else known = ask(std::integral_constant<int, 0>{});
    }
    return known * hp_cuda_gemv::device_sm_count();
}
template <hp_dtype KV>
MmaWave mma_wave(bool ring) {
    MmaWave wave;
    if constexpr (HP_CUDA_ATTN_MMA_ONE_WAVE && HP_CUDA_ATTN_KERNEL == 2 && KV != HP_DTYPE_F32) {
        wave.blocks = mma_wave_blocks<KV, kFdWarps>(ring);
        if constexpr (mma_wide_compiled(64)) wave.wide_blocks = mma_wave_blocks<KV, kMmaWideWarps>(ring);
    }
    return wave;
}

}  // namespace hp_cuda_baseline
