// Skinny GEMM of the CUDA baseline (knob skinny_min_tokens): the decode projections of dense
// models' steps of 1..gemv_max_tokens tokens, same Params and epilogues as the decode GEMV
// (gemv.cuh). It was written for 16..64 tokens, where the GEMV's one-tile-per-cluster scheme loses:
// there every 16-row tile reads all the step's activations from L2 again (at 64 tokens and d_model
// 2048, 256 KB per tile: 134 MB per gate/up launch, 2x its weights; bench/RESULTS.md "Keeping the
// weight stream busy"), so cuBLAS took those steps, with a norm kernel before every projection and split-K
// reduce and SiLU kernels after some. On the H200 it also beat the GEMV at 1 and 8 tokens, and lost
// to cuBLAS at 64 (bench/RESULTS.md "Skinny GEMM").
//
// Here a block owns R = skinny_warps x 16 x skinny_tiles rows (a warp owns skinny_tiles 16-row
// tiles; SwiGLU: one tile of gate and the same tile of up) and a slice of the inputs; the blocks of a
// thread-block cluster split the inputs between them. The block walks its slice in chunks of
// 32 x skinny_unroll inputs through a ring of skinny_stages shared-memory stages: cp.async copies a
// chunk of the block's weight rows and of all the step's activations into a stage, skinny_stages - 1
// chunks ahead of the one being multiplied (the first ones' weights before griddepcontrol.wait, as
// the GEMV does), so a block keeps two stages of loads in flight (28-61 KB at 8-32 tokens with the
// default knobs; the wgmma path below keeps up to 7) without holding them in registers, and
// the activations are read from L2 once per block: activation traffic is weights x tokens / R
// instead of weights x tokens / 16. Each warp then multiplies its rows from shared memory:
// lane (g, q) takes inputs [8 q, 8 q + 8) of a 32-input step of rows g and g + 8 and of token g,
// which are its A and B fragments of two m16n8k16 products if the inputs of a product are taken in
// the order the lanes hold them (as in gemv.cuh). Rows are padded so that the 8 lanes of a
// quarter-warp's 16-byte loads (two rows, four pieces each) hit distinct banks.
//
// wgmma path (knob skinny_wgmma_min_tokens, sm_90a on a compute capability 9.0 device): the same
// blocks, ring and epilogue, but a stage holds the chunk (64 inputs) unpadded, 128-byte swizzled,
// and each warpgroup multiplies its 64-row slices by all the step's tokens with one
// wgmma.m64nNk16 per 16 inputs, reading the tokens from shared memory once per warpgroup rather
// than once per warp (the mma.sync loop's activation reads grow with the tokens: 2x the weight
// bytes at 32 tokens). Its ring depth is per token tile (skinny_wgmma_stages_8/16/32/64). On the
// H200 it took llama-3.2-1b's batch-32 step from 1.62 to 1.49 ms (bench/RESULTS.md "wgmma").
//
// Partial sums: each block writes its warps' accumulators to shared memory; the cluster's blocks
// then add the cluster's partials in rank order (distributed shared memory: deterministic, no
// atomics) and run gemv.cuh's epilogue (store_element), block `rank` for its share of the tokens,
// so the folded norm's 1/rms is summed only for the tokens a block stores; the q/k/v launch with
// Params::head runs the head epilogue instead (skinny_head_epilogue: RoPE, the KV-cache write). Takes aligned operands
// with n_in a multiple of 8 and up to 64 tokens (skinny_fits); rows past n_out and inputs past n_in
// are copied as zeros.
#pragma once

#include <atomic>

namespace hp_cuda_gemv {

constexpr int kSkinnyWarps = HP_CUDA_SKINNY_WARPS;
constexpr int kSkinnyTiles = HP_CUDA_SKINNY_TILES;    // 16-row tiles per warp (store, accumulate)
constexpr int kSkinnyUnroll = HP_CUDA_SKINNY_UNROLL;  // 32-input steps per chunk
constexpr int kSkinnyStages = HP_CUDA_SKINNY_STAGES;  // chunks in the shared-memory ring
// The same on the wgmma path, per token tile (launches of up to 8, 16, 32, 64 tokens); 0: the most
// (up to 8) that leave room for two blocks per SM.
constexpr int kSkinnyWgmmaStages[4] = {HP_CUDA_SKINNY_WGMMA_STAGES_8, HP_CUDA_SKINNY_WGMMA_STAGES_16, HP_CUDA_SKINNY_WGMMA_STAGES_32,
                                       HP_CUDA_SKINNY_WGMMA_STAGES_64};
constexpr int kSkinnyChunk = 32 * kSkinnyUnroll;      // inputs per chunk
// Shared-memory row of one chunk (a weight row's or a token's), in bf16 elements: 64 bytes of
// padding when the chunk is a multiple of 128 bytes, so that rows g and g + 1 start 64 bytes apart
// in the banks (the 8 lanes of a quarter-warp's 16-byte loads: rows g, g + 1, four pieces each).
constexpr int kSkinnyPitch = kSkinnyChunk + (kSkinnyChunk * 2 % 128 == 0 ? 32 : 0);

// Matrix tiles (16 weight rows) per warp: SwiGLU one tile of gate and the same tile of up.
__host__ __device__ constexpr int skinny_matrix_tiles(int epi) { return epi == kSiluMul ? 2 : kSkinnyTiles; }
// Output rows of a block.
__host__ __device__ constexpr int skinny_rows_of(int epi) { return kSkinnyWarps * kTileRows * (epi == kSiluMul ? 1 : kSkinnyTiles); }
// One ring stage: the chunk of the block's weight rows, then of the step's tokens.
// The wgmma path (wg) needs no padding (the swizzle spreads the banks): rows of 128 bytes, whole
// 1024-byte atoms as the tokens come in multiples of 8.
__host__ __device__ constexpr int skinny_stage_elements(int epi, int n_tokens, bool wg = false) {
    return (kSkinnyWarps * skinny_matrix_tiles(epi) * kTileRows + n_tokens) * (wg ? kSkinnyChunk : kSkinnyPitch);
}
// Stages of the ring for a launch of n_tokens (a multiple of 8): skinny_stages, or on the wgmma path
// skinny_wgmma_stages_<tokens>, where 0 asks for the most (up to 8) that leave room for two blocks
// per SM.
__host__ __device__ constexpr int skinny_stages_of(int epi, int n_tokens, bool wg) {
    if (!wg) return kSkinnyStages;
    const int knob = kSkinnyWgmmaStages[n_tokens <= 8 ? 0 : n_tokens <= 16 ? 1 : n_tokens <= 32 ? 2 : 3];
    if (knob > 0) return knob;
    const int fit = (232448 / 2 - 1024) / (skinny_stage_elements(epi, n_tokens, true) * 2);
    return fit < 2 ? 2 : fit > 8 ? 8 : fit;
}
// The partial sums of a block ([warp][matrix tile][token][row] floats) and kStore's head epilogue's
// finished rows ([token][row] floats).
__host__ __device__ constexpr size_t skinny_partials_bytes(int epi, int n_tokens) {
    return size_t(kSkinnyWarps) * skinny_matrix_tiles(epi) * n_tokens * kTileRows * 4;
}
__host__ __device__ constexpr size_t skinny_head_rows_bytes(int n_tokens) { return size_t(n_tokens) * skinny_rows_of(kStore) * 4; }
// Whether kStore blocks hold the head epilogue (knob skinny_head): where its rows and per-token tail
// fit beside the partial sums at 64 tokens (with large blocks, e.g. 8 warps x 4 tiles, they do not,
// and the head kernel runs).
constexpr bool kSkinnyHeadRoom =
    HP_CUDA_SKINNY_HEAD && skinny_partials_bytes(kStore, kMaxTokens) + skinny_head_rows_bytes(kMaxTokens) + kMaxTokens * 16 <= 232448;
__host__ __device__ constexpr bool skinny_head_held(int epi) { return epi == kStore && kSkinnyHeadRoom; }
// Shared memory of a block: the ring, later reused for the partial sums and the head epilogue's rows
// (the body); then 1/rms per token, and with the head epilogue its position and cache row per token.
__host__ __device__ constexpr size_t skinny_body_bytes(int epi, int n_tokens, bool wg) {
    const size_t ring = size_t(skinny_stages_of(epi, n_tokens, wg)) * skinny_stage_elements(epi, n_tokens, wg) * 2;
    const size_t partials = skinny_partials_bytes(epi, n_tokens) + (skinny_head_held(epi) ? skinny_head_rows_bytes(n_tokens) : 0);
    return ring > partials ? ring : partials;
}
__host__ __device__ constexpr size_t skinny_shared_bytes(int epi, int n_tokens, bool wg = false) {
    return skinny_body_bytes(epi, n_tokens, wg) + size_t(n_tokens) * (skinny_head_held(epi) ? 16 : 4);
}

static_assert(skinny_shared_bytes(kStore, kMaxTokens) <= 232448 && skinny_shared_bytes(kSiluMul, kMaxTokens) <= 232448,
              "skinny GEMM: the ring of skinny_stages chunks or the partial sums exceed 227 KB of shared memory at 64 tokens");
// Whether every token tile's wgmma ring (skinny_wgmma_stages_<tokens>) fits a block's 227 KB.
__host__ __device__ constexpr bool skinny_wgmma_rings_fit() {
    for (int tokens = 8; tokens <= kMaxTokens; tokens *= 2) {
        if (skinny_shared_bytes(kStore, tokens, true) > 232448 || skinny_shared_bytes(kSiluMul, tokens, true) > 232448) return false;
    }
    return true;
}
static_assert(skinny_wgmma_rings_fit(), "skinny GEMM: a skinny_wgmma_stages_<tokens> ring exceeds 227 KB of shared memory");

__device__ inline void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ inline void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// wgmma (sm_90a) for the skinny GEMM's warpgroup path (knob skinny_wgmma_min_tokens). Operands sit
// in shared memory K-major with the 128-byte swizzle: a row's 64 inputs of a chunk are 128 bytes,
// 8 rows make a 1024-byte atom (1024-aligned), and 16-byte piece c of row r is stored at piece
// c ^ (r % 8), so the 8 pieces of a row and the 8 rows of a piece both fall in distinct banks.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HP_CUDA_WGMMA_DEVICE 1
#else
#define HP_CUDA_WGMMA_DEVICE 0
#endif
// Descriptor of a K-major, 128-byte-swizzled operand starting at `address` (8-row atoms 1024 bytes
// apart; the leading byte offset is unused for this layout, by convention 1).
__device__ inline uint64_t wgmma_desc_sw128(uint32_t address) {
    return uint64_t((address & 0x3FFFFu) >> 4) | uint64_t(1) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
__device__ inline void wgmma_fence() {
#if HP_CUDA_WGMMA_DEVICE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
// Orders this thread's completed cp.async writes to shared memory (generic proxy) before wgmma's
// reads of them (async proxy), as the PTX memory model asks; issued before the barrier.
__device__ inline void fence_proxy_async_shared() {
#if HP_CUDA_WGMMA_DEVICE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Waits until at most PENDING of this warpgroup's committed groups of products are still running.
template <int PENDING>
__device__ inline void wgmma_wait() {
#if HP_CUDA_WGMMA_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
#endif
}
// Commits the products issued since the last commit as one group, then wgmma_wait<PENDING>: with 1,
// the previous chunk's products are done and this chunk's may still run (knob skinny_wgmma_overlap).
template <int PENDING>
__device__ inline void wgmma_commit_and_wait() {
#if HP_CUDA_WGMMA_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
    wgmma_wait<PENDING>();
}
// Keeps the compiler from moving accesses of the accumulators across the asynchronous products.
template <int NB>
__device__ inline void wgmma_fence_acc(float (&d)[NB][4]) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[nb][i])::"memory");
}
// d[64 rows][8 NB tokens] += a[64][16] b[16][8 NB] for one warpgroup: warp w of the group holds rows
// 16 w .. 16 w + 15 in mma_16816's accumulator layout per 8 tokens. Traps where wgmma does not exist
// (the host takes this path only on a device of compute capability 9.0 in a build with sm_90a).
template <int NB>
__device__ inline void wgmma_m64k16(float (&d)[NB][4], uint64_t a, uint64_t b);
#if HP_CUDA_WGMMA_DEVICE
template <>
__device__ inline void wgmma_m64k16<1>(float (&d)[1][4], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
                 : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ inline void wgmma_m64k16<2>(float (&d)[2][4], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
                 : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ inline void wgmma_m64k16<4>(float (&d)[4][4], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ inline void wgmma_m64k16<8>(float (&d)[8][4], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(a), "l"(b), "r"(1));
}
#else
template <int NB>
__device__ inline void wgmma_m64k16(float (&d)[NB][4], uint64_t, uint64_t) {
    __trap();
}
#endif

// A value into the KV cache as its dtype.
__device__ inline void store_kv(hp_dtype dtype, void *cache, int64_t i, float value) {
    switch (dtype) {
        case HP_DTYPE_F32: static_cast<float *>(cache)[i] = value; break;
        case HP_DTYPE_F16: static_cast<__half *>(cache)[i] = __float2half_rn(value); break;
        case HP_DTYPE_BF16: static_cast<__nv_bfloat16 *>(cache)[i] = __float2bfloat16_rn(value); break;
    }
}

// RoPE frequencies per lane of the head epilogue for blocks of R rows (d_head <= R: pairs <= R / 2).
__host__ __device__ constexpr int skinny_head_freqs(int rows) { return (rows / 2 + 31) / 32; }

// The cache row (of n_head_kv * d_head elements) of `position` in sequence `seq`.
__device__ inline int64_t head_cache_row(const HeadOut &h, int seq, int position) {
    const int32_t *table = h.block_tables + int64_t(seq) * h.max_blocks;
    return int64_t(table[position / h.block_tokens]) * h.block_tokens + position % h.block_tokens;
}

// kStore's head epilogue (HeadOut) of a block whose R rows are whole heads of segment `seg_index`
// (0 q, 1 k, 2 v): head_s holds its finished rows (bias added) of tokens [t_lo, t_hi) as [token]
// [row], position_s their positions and row_s their cache rows (k, v), freq[j] the lane's
// inv_freq[lane + 32 j]. One warp per (token, head), the head kernel's arithmetic (kernels.cuh):
// the head's RMSNorm for q and k where the model has one, RoPE on pairs (i, i + d_head / 2), then q
// back to segment 0's y and k, v into the paged cache.
template <int R>
__device__ inline void skinny_head_epilogue(const Params &p, const Segment &seg, int seg_index, int row0, int t_lo, int t_hi, const float *head_s,
                                            const int *position_s, const int64_t *row_s, const float (&freq)[skinny_head_freqs(R)]) {
    const HeadOut &h = p.head;
    const int d = h.d_head, half = d / 2, heads = R / d, lane = threadIdx.x % 32;
    for (int item = threadIdx.x / 32; item < (t_hi - t_lo) * heads; item += kSkinnyWarps) {
        const int t = t_lo + item / heads, first = row0 + item % heads * d;  // the head's first row
        if (first >= seg.n_out) continue;
        const float *value = head_s + (t - t_lo) * R + item % heads * d;
        const int position = position_s[t - t_lo];
        int64_t at = 0;  // the head's first element in the cache (k, v)
        if (seg_index > 0) at = row_s[t - t_lo] * h.n_head_kv * d + first;
        if (seg_index == 2) {
            for (int i = lane; i < d; i += 32) store_kv(h.kv_dtype, h.v_cache, at + i, value[i]);
            continue;
        }
        const void *norm = seg_index == 0 ? h.q_norm : h.k_norm;
        float scale = 1.0f;
        if (norm) {
            float sum_sq = 0.0f;
            for (int i = lane; i < d; i += 32) sum_sq += value[i] * value[i];
            for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
            scale = rsqrtf(sum_sq / float(d) + h.eps);
        }
#pragma unroll
        for (int j = 0; j < skinny_head_freqs(R); ++j) {
            const int i = lane + 32 * j;
            if (i >= half) break;
            float first_v = value[i], second_v = value[i + half];
            if (norm) {
                first_v = first_v * scale * load_bias(h.norm_dtype, norm, i);
                second_v = second_v * scale * load_bias(h.norm_dtype, norm, i + half);
            }
            float sin_a, cos_a;
            sincosf(float(position) * freq[j], &sin_a, &cos_a);
            const float a = first_v * cos_a - second_v * sin_a, b = second_v * cos_a + first_v * sin_a;
            if (seg_index == 0) {
                float *q = static_cast<float *>(seg.y) + int64_t(t) * seg.n_out + first;
                q[i] = a;
                q[i + half] = b;
            } else {
                store_kv(h.kv_dtype, h.k_cache, at + i, a);
                store_kv(h.kv_dtype, h.k_cache, at + i + half, b);
            }
        }
    }
}

// Grid (cluster, row blocks of all segments, 1), launched as clusters of gridDim.x blocks that split
// the inputs in whole chunks. NB tiles of 8 tokens; NORM: scaled by 1/rms from x_sum_sq. WG: the
// products by wgmma, each warpgroup's 64-row slices (4 warps x 16 rows of one matrix tile index m)
// against all the step's tokens read from shared memory once per warpgroup (sm_90a; chunks of 64
// inputs, stored 128-byte swizzled), instead of mma.sync fed by every warp's own shared-memory loads.
template <int NB, int EPI, bool NORM, bool WG>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_kernel(const Params p) {
    constexpr int M = skinny_matrix_tiles(EPI), U = kSkinnyUnroll, NT = NB * 8, S = skinny_stages_of(EPI, NB * 8, WG);
    // Knob skinny_wgmma_overlap: one chunk's products stay in flight through the next barrier, so the
    // copies run L = S - 2 chunks ahead (the stage those products read is refilled one chunk later);
    // in token tiles of at most skinny_wgmma_overlap_max_tokens.
    constexpr bool kOverlap = WG && HP_CUDA_SKINNY_WGMMA_OVERLAP && NT <= HP_CUDA_SKINNY_WGMMA_OVERLAP_MAX_TOKENS && S >= 3;
    constexpr int L = kOverlap ? S - 2 : S - 1;  // chunks in flight ahead of the one being multiplied
    constexpr int R = skinny_rows_of(EPI), kTiles = R / kTileRows;  // output rows and 16-row tiles of the block
    constexpr int kWeightRows = kSkinnyWarps * M * kTileRows;         // weight rows of a stage
    constexpr int kPiecesPerRow = kSkinnyChunk / 8;                    // 16-byte pieces of a row's chunk
    extern __shared__ __align__(1024) uint4 skinny_shared[];
    __nv_bfloat16 *ring = reinterpret_cast<__nv_bfloat16 *>(skinny_shared);
    float *partial = reinterpret_cast<float *>(skinny_shared);  // after the main loop
    float *head_s = partial + skinny_partials_bytes(EPI, NT) / 4;  // the head epilogue's rows: [token][row]
    char *tail = reinterpret_cast<char *>(skinny_shared) + skinny_body_bytes(EPI, NT, WG);
    float *inv_rms_s = reinterpret_cast<float *>(tail);
    int64_t *head_row_s = reinterpret_cast<int64_t *>(tail + NT * 4);  // kStore's head epilogue: per token its cache row
    int *head_position_s = reinterpret_cast<int *>(tail + NT * 12);    // ... and its position
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    // The block's segment, chosen among constant indices (a dynamic index into the kernel's
    // parameters would copy them to local memory).
    int seg_index = 0;
    Segment seg = p.segment[0];
    if (p.n_segment > 1 && int(blockIdx.y) >= p.segment[1].first_block) seg = p.segment[1], seg_index = 1;
    if (p.n_segment > 2 && int(blockIdx.y) >= p.segment[2].first_block) seg = p.segment[2], seg_index = 2;
    const int n_t = min(NT, p.n_token);
    const int row0 = (int(blockIdx.y) - seg.first_block) * R;
    const int n_in = p.n_in, n_chunk8 = n_in / 8;  // 16-byte pieces of a row
    const int n_kc = (n_in + kSkinnyChunk - 1) / kSkinnyChunk, per_block = (n_kc + gridDim.x - 1) / gridDim.x;
    const int kc_begin = min(n_kc, int(blockIdx.x) * per_block), kc_end = min(n_kc, kc_begin + per_block), n_local = kc_end - kc_begin;

    // Copies: thread `tid` always takes 16-byte piece c = tid % P of a row's chunk and rows
    // tid / P + k (T / P) in pass k, so its source pointers (advanced by one chunk per chunk) and
    // shared-memory offsets are fixed for the whole launch: a copy is an add and a cp.async.
    constexpr int T = kSkinnyWarps * 32, P = kPiecesPerRow, kRowsPerPass = T / P;
    static_assert(T % P == 0 && kWeightRows % kRowsPerPass == 0, "skinny GEMM: whole rows per copy pass");
    constexpr int kWeightPasses = kWeightRows / kRowsPerPass, kTokenPasses = (NT + kRowsPerPass - 1) / kRowsPerPass;
    static_assert(!WG || (kSkinnyWarps % 4 == 0 && kSkinnyChunk == 64), "skinny GEMM: wgmma needs whole warpgroups and chunks of 64 inputs");
    const int piece = threadIdx.x % P, first_row = threadIdx.x / P;
    // Byte offset of this thread's piece of weight row sr / token row t in a stage (the tokens after
    // the weight rows: 1024-aligned, as stages are). WG: stage row sr = (w M + m) 16 + r (warp w's
    // matrix tile m) is row (w % 4) 16 + r of slice (w / 4) M + m (64 rows of 128 bytes, swizzled).
    constexpr uint32_t kTokenBase = uint32_t(kWeightRows * (WG ? kSkinnyChunk : kSkinnyPitch)) * 2u;
    static_assert(!WG || (kTokenBase % 1024 == 0 && uint32_t(skinny_stage_elements(EPI, NT, WG)) * 2u % 1024 == 0), "skinny GEMM: wgmma atoms 1024-aligned");
    auto swizzled = [&](int row) { return uint32_t(row * 128 + ((piece ^ (row % 8)) * 16)); };
    auto weight_offset = [&](int sr) {
        if constexpr (WG) {
            const int j = sr / kTileRows, w = j / M;
            return uint32_t(((w / 4) * M + j % M) * 64 * 128) + swizzled((w % 4) * kTileRows + sr % kTileRows);
        } else {
            return uint32_t(sr * kSkinnyPitch + piece * 8) * 2u;
        }
    };
    auto token_offset = [&](int t) {
        if constexpr (WG) return kTokenBase + swizzled(t);
        else return kTokenBase + uint32_t(t * kSkinnyPitch + piece * 8) * 2u;
    };
    const __nv_bfloat16 *w_src[kWeightPasses];
    bool w_valid[kWeightPasses];
#pragma unroll
    for (int k = 0; k < kWeightPasses; ++k) {  // stage row sr = (w M + m) 16 + r: row r of warp w's matrix tile m
        const int sr = first_row + k * kRowsPerPass, j = sr / kTileRows, w = j / M, m = j % M;
        const int row = row0 + (EPI == kSiluMul ? w : j) * kTileRows + sr % kTileRows;
        w_valid[k] = row < seg.n_out;
        w_src[k] = (EPI == kSiluMul && m == 1 ? seg.w2 : seg.w) + int64_t(w_valid[k] ? row : 0) * n_in + piece * 8;
    }
    const uint32_t ring_address = shared_address(ring);
    if (WG && (ring_address & 1023u)) __trap();  // the swizzle atoms need 1024-byte alignment
    constexpr uint32_t kStageBytes = uint32_t(skinny_stage_elements(EPI, NT, WG)) * 2u;
    uint32_t w_dst[kWeightPasses];
#pragma unroll
    for (int k = 0; k < kWeightPasses; ++k) w_dst[k] = ring_address + weight_offset(first_row + k * kRowsPerPass);
    auto copy = [](uint32_t dst, const void *src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
#endif
    };
    // Chunk kc's weight rows into stage `stage` (zeros past n_out and n_in).
    auto load_weights = [&](int stage, int kc) {
        const bool in_row = kc * P + piece < n_chunk8;
#pragma unroll
        for (int k = 0; k < kWeightPasses; ++k) {
            const bool valid = w_valid[k] && in_row;
            copy(w_dst[k] + stage * kStageBytes, valid ? w_src[k] + kc * kSkinnyChunk : seg.w, valid);
        }
    };
    // Chunk kc's activations of the NT tokens (zeros past n_t and n_in) into stage `stage`; the
    // token rows are set after the wait (x_rows may be the previous kernel's output).
    const __nv_bfloat16 *x_src[kTokenPasses];
    bool x_valid[kTokenPasses];
    auto set_token_rows = [&] {
#pragma unroll
        for (int k = 0; k < kTokenPasses; ++k) {
            const int t = first_row + k * kRowsPerPass;
            x_valid[k] = t < n_t;
            x_src[k] = p.x + (x_valid[k] ? int64_t(p.x_rows ? p.x_rows[t] : t) * n_in : 0) + piece * 8;
        }
    };
    auto load_activations = [&](int stage, int kc) {
        const bool in_row = kc * P + piece < n_chunk8;
#pragma unroll
        for (int k = 0; k < kTokenPasses; ++k) {
            if (first_row + k * kRowsPerPass >= NT) break;  // rows of the stage past NT do not exist
            const bool valid = x_valid[k] && in_row;
            copy(ring_address + token_offset(first_row + k * kRowsPerPass) + stage * kStageBytes, valid ? x_src[k] + kc * kSkinnyChunk : p.x, valid);
        }
    };

    float acc[M][NB][4] = {};

    // The first L chunks' weights before the wait (weights are never written during a step), their
    // activations after it; one commit group per chunk (the first also holds the early weights).
    launch_dependents();
    if (kL2Prefetch) prefetch_l2(p.prefetch, linear_block(), grid_blocks());
    for (int s = 0; s < L && s < n_local; ++s) load_weights(s, kc_begin + s);
    // This block's share of the tokens in the epilogue.
    const int per_rank = (n_t + gridDim.x - 1) / gridDim.x;
    const int t_lo = min(n_t, int(blockIdx.x) * per_rank), t_hi = min(n_t, t_lo + per_rank);
    static_assert(NT <= kSkinnyWarps * 32, "skinny GEMM: a thread per token of the block's share");
    // The head epilogue: thread i's token t_lo + i (per_rank <= NT <= the block's threads) and its
    // position, a step input (written before the step's first kernel), and each lane's RoPE
    // frequencies, loaded before the wait and used after the main loop.
    const bool head = skinny_head_held(EPI) && p.head.d_head > 0;
    const int head_t = t_lo + int(threadIdx.x);
    const int head_position = head && head_t < t_hi ? p.head.positions[head_t] : 0;
    float head_freq[skinny_head_freqs(R)];  // the RoPE frequencies of this lane's pairs (set at create())
#pragma unroll
    for (int j = 0; j < skinny_head_freqs(R); ++j) head_freq[j] = head && lane + 32 * j < p.head.d_head / 2 ? p.head.inv_freq[lane + 32 * j] : 0.0f;
    wait_for_previous_grid();  // the activations (and a residual) are the previous kernel's output
    // ... and its sequence (token_seq is an earlier kernel's output), used after the main loop too.
    const int head_seq = head && head_t < t_hi ? p.head.token_seq[head_t] : 0;
    set_token_rows();
    for (int s = 0; s < L; ++s) {
        if (s < n_local) load_activations(s, kc_begin + s);
        cp_async_commit();
    }

    // Their 1/rms (NORM).
    if constexpr (NORM) {
        for (int t = t_lo + warp; t < t_hi; t += kSkinnyWarps) {
            const float inv = warp_inv_rms(p.x_sum_sq + int64_t(p.x_rows ? p.x_rows[t] : t) * p.n_sum_sq, p.n_sum_sq, n_in, p.norm_eps);
            if (lane == 0) inv_rms_s[t] = inv;
        }
    }

    for (int i = 0; i < n_local; ++i) {
        cp_async_wait<L - 1>();  // chunk i has landed (this thread's copies) ...
        if constexpr (WG) fence_proxy_async_shared();  // ... visible to wgmma too ...
        __syncthreads();         // ... everyone's, and every warp is done with chunk i + L's stage (chunk i - 1's, or i - 2's with kOverlap)
        if (i + L < n_local) {
            load_weights((i + L) % S, kc_begin + i + L);
            load_activations((i + L) % S, kc_begin + i + L);
        }
        cp_async_commit();  // possibly empty: one group per iteration keeps the count
        if constexpr (WG) {
            // Per 16 inputs: one m64nNTk16 product per matrix tile index m; the descriptors
            // advance 32 bytes within the swizzled rows per 16 inputs.
            const uint32_t stage = ring_address + (i % S) * kStageBytes;
            wgmma_fence();
#pragma unroll
            for (int m = 0; m < M; ++m) {
#pragma unroll
                for (int k16 = 0; k16 < 2 * U; ++k16) {
                    const uint32_t a = stage + uint32_t(((warp / 4) * M + m) * 64 * 128 + k16 * 32);
                    wgmma_m64k16<NB>(acc[m], wgmma_desc_sw128(a), wgmma_desc_sw128(stage + kTokenBase + k16 * 32));
                }
            }
            // The stage is free for the copies after the next barrier; with kOverlap, the previous
            // chunk's stage (the copies of the barrier after next).
            wgmma_commit_and_wait<kOverlap ? 1 : 0>();
#pragma unroll
            for (int m = 0; m < M; ++m) wgmma_fence_acc<NB>(acc[m]);
            continue;
        }
        const __nv_bfloat16 *w_chunk = ring + (i % S) * skinny_stage_elements(EPI, NT, WG);
        const __nv_bfloat16 *x_chunk = w_chunk + kTokenBase / 2;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            uint4 a[M][2];
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    a[m][h] = *reinterpret_cast<const uint4 *>(w_chunk + ((warp * M + m) * kTileRows + g + 8 * h) * kSkinnyPitch + u * 32 + q * 8);
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                const uint4 b = *reinterpret_cast<const uint4 *>(x_chunk + (nb * 8 + g) * kSkinnyPitch + u * 32 + q * 8);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    mma_16816(acc[m][nb], a[m][0].x, a[m][1].x, a[m][0].y, a[m][1].y, b.x, b.y);
                    mma_16816(acc[m][nb], a[m][0].z, a[m][1].z, a[m][0].w, a[m][1].w, b.z, b.w);
                }
            }
        }
    }
    if constexpr (kOverlap) {  // the last chunk's products
        wgmma_wait<0>();
#pragma unroll
        for (int m = 0; m < M; ++m) wgmma_fence_acc<NB>(acc[m]);
    }
    cp_async_wait<0>();
    if (head && head_t < t_hi) {
        // The token's cache row (k, v) from its sequence's block table.
        head_position_s[head_t - t_lo] = head_position;
        if (seg_index > 0) head_row_s[head_t - t_lo] = head_cache_row(p.head, head_seq, head_position);
    }
    __syncthreads();  // the ring is no longer read: the partials reuse it

    // Partials: lane (g, q) holds rows g, g + 8 and tokens 2q, 2q + 1 of each 8-token tile; stored
    // as partial[(warp * M + m) * NT + token][row] (the buffers are no longer read).
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
            float *out = partial + ((warp * M + m) * NT + nb * 8 + 2 * q) * kTileRows + g;
            out[0] = acc[m][nb][0];
            out[kTileRows] = acc[m][nb][1];
            out[8] = acc[m][nb][2];
            out[kTileRows + 8] = acc[m][nb][3];
        }
    }
    // Epilogue units (tile, token) of 16 lanes, tokens [t_lo, t_hi) of this rank; two per warp pass.
    // The residual (kAccumulate) is loaded one pass ahead, the first pass's before the cluster
    // barrier; the cluster's partials of an element are loaded together, then added in rank order.
    constexpr int MS = EPI == kSiluMul ? 2 : 1;  // sums per element
    const int n_unit = kTiles * (t_hi - t_lo), r = lane % 16;
    struct Unit {
        bool exists, active;  // active: exists and its row is below n_out
        int tile, t, row;
    };
    auto unit_at = [&](int base) {
        const int unit = base + lane / 16;
        Unit u;
        u.exists = unit < n_unit;
        u.tile = u.exists ? unit % kTiles : 0;
        u.t = t_lo + (u.exists ? unit / kTiles : 0);
        u.row = row0 + u.tile * kTileRows + r;
        u.active = u.exists && u.row < seg.n_out;
        return u;
    };
    Unit unit = unit_at(warp * 2);
    Prior prior = load_prior<EPI>(p, seg, unit.t, unit.row, unit.active);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's partials (and 1/rms) are in its shared memory
    const float *rank_partial[8];
#pragma unroll
    for (int rank = 0; rank < 8; ++rank) rank_partial[rank] = rank < int(gridDim.x) ? cluster.map_shared_rank(partial, rank) : partial;
    for (int base = warp * 2; base < n_unit; base += kSkinnyWarps * 2) {
        const Unit next = unit_at(base + kSkinnyWarps * 2);
        const Prior next_prior = load_prior<EPI>(p, seg, next.t, next.row, next.active);  // zeros past the last unit
        float sum[MS];
#pragma unroll
        for (int s = 0; s < MS; ++s) {
            // matrix tile j: SwiGLU tile `tile` is warp `tile`'s gate (0) and up (1); else warp tile / M's m = tile % M
            const int j = EPI == kSiluMul ? unit.tile * 2 + s : unit.tile;
            const int at = (j * NT + unit.t) * kTileRows + r;
            float part[8];
#pragma unroll
            for (int rank = 0; rank < 8; ++rank) part[rank] = rank < int(gridDim.x) ? rank_partial[rank][at] : 0.0f;
            float total = 0.0f;
#pragma unroll
            for (int rank = 0; rank < 8; ++rank) {
                if (rank < int(gridDim.x)) total += part[rank];
            }
            if constexpr (NORM) total *= inv_rms_s[unit.t];
            sum[s] = total;
        }
        if (head) {  // the head epilogue below takes the finished rows
            if (unit.active) head_s[(unit.t - t_lo) * R + unit.tile * kTileRows + r] = sum[0] + load_bias(seg.bias_dtype, seg.bias, unit.row);
        } else {
            // lead: the tile's first row, which exists (tiles wholly past n_out write no sum of squares)
            store_element<EPI, MS>(p, seg, unit.t, unit.row, unit.row / kTileRows, unit.active, unit.active && r == 0, sum, prior);
        }
        unit = next;
        prior = next_prior;
    }
    if (head) {
        __syncthreads();  // every row of the block's heads is in head_s
        skinny_head_epilogue<R>(p, seg, seg_index, row0, t_lo, t_hi, head_s, head_position_s, head_row_s, head_freq);
    }
    cluster.sync();  // keep every block's shared memory alive until the cluster has read it
}

// Blocks per cluster: the fewest (a power of two up to 8) that give at least `target` blocks over
// all row blocks, keeping four chunks per block on average (the last blocks of a cluster may get
// fewer, or none). `target`: skinny_target_blocks_8 for launches of up to 8 tokens, else
// skinny_target_blocks.
inline int skinny_cluster_size(int row_blocks, int n_in, int target) {
    const int n_kc = (n_in + kSkinnyChunk - 1) / kSkinnyChunk;
    int size = 1;
    while (size < 8 && row_blocks * size < target && 4 * size <= n_kc) size *= 2;
    return size;
}

// Whether the skinny kernel takes a launch: 1..64 tokens, n_in a multiple of 8, 16-byte aligned
// operands (weights, activations), norm_out only with one segment.
inline bool skinny_fits(const Params &p, int epi) {
    if (p.n_token < 1 || p.n_token > kMaxTokens || p.n_in < 8 || p.n_in % 8 != 0 || !aligned16(p.x)) return false;
    if (p.norm_out.h && p.n_segment != 1) return false;
    for (int s = 0; s < p.n_segment; ++s) {
        if (!aligned16(p.segment[s].w) || (epi == kSiluMul && !aligned16(p.segment[s].w2))) return false;
    }
    return true;
}

// Writes whether this module's code for the running device has wgmma (its sm_90a image was loaded).
__global__ void skinny_wgmma_probe_kernel(int *out) { *out = HP_CUDA_WGMMA_DEVICE; }

// Whether the skinny GEMM may take its wgmma path here: whole warpgroups per block, chunks of 64
// inputs (skinny_unroll 2), a device of compute capability 9.0, and this module's image for it built
// for sm_90a, which a one-thread probe kernel reports (a build for plain sm_90 or PTX alone says no).
// Asked once per device; the first call synchronizes the device, so the plugin asks at create(),
// never during a capture.
inline bool skinny_wgmma_available() {
    if (kSkinnyWarps % 4 != 0 || kSkinnyChunk != 64) return false;
    static std::atomic<int> known[64];  // 0: not asked yet, 1: no, 2: yes
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
    if (const int answer = known[device].load()) return answer == 2;
    int major = 0, minor = 0, has = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    int *flag = nullptr;
    if (major == 9 && minor == 0 && cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
        skinny_wgmma_probe_kernel<<<1, 1>>>(flag);
        if (cudaMemcpy(&has, flag, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) {
            has = 0;
            cudaGetLastError();  // a probe that could not run (no image for the device) leaves no error behind
        }
        cudaFree(flag);
    }
    known[device].store(has ? 2 : 1);
    return has != 0;
}

// Which products the skinny GEMM uses: knob skinny_wgmma_min_tokens decides (kByKnob), or the test
// picks one.
enum class SkinnyMma { kByKnob, kMmaSync, kWgmma };

template <int NB, int EPI, bool WG>
void launch_skinny_kernel(const Params &p, int row_blocks, cudaStream_t stream) {
    void (*kernel)(Params) = p.x_sum_sq ? skinny_kernel<NB, EPI, true, WG> : skinny_kernel<NB, EPI, false, WG>;
    const size_t bytes = skinny_shared_bytes(EPI, NB * 8, WG);
    if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    const int target = NB == 1 ? HP_CUDA_SKINNY_TARGET_BLOCKS_8 : HP_CUDA_SKINNY_TARGET_BLOCKS;
    const dim3 grid(unsigned(skinny_cluster_size(row_blocks, p.n_in, target)), unsigned(row_blocks), 1);
    launch_pdl_clustered(kernel, grid, dim3(kSkinnyWarps * 32), bytes, grid.x, stream, p);
}

template <int NB, int EPI>
void launch_skinny_tokens(const Params &p, int row_blocks, bool wgmma, cudaStream_t stream) {
    if constexpr (kSkinnyWarps % 4 == 0 && kSkinnyChunk == 64) {
        if (wgmma) return launch_skinny_kernel<NB, EPI, true>(p, row_blocks, stream);
    }
    launch_skinny_kernel<NB, EPI, false>(p, row_blocks, stream);
}

// Launches the skinny kernel on `stream` (the caller checked skinny_fits). EPI is the same for
// every segment. kWgmma where skinny_wgmma_available() is false takes mma.sync.
template <int EPI>
void launch_skinny(Params p, cudaStream_t stream, SkinnyMma mma = SkinnyMma::kByKnob) {
    if (p.n_token <= 0 || p.n_segment <= 0) return;
    int row_blocks = 0;
    for (int s = 0; s < p.n_segment; ++s) {
        p.segment[s].first_block = row_blocks;
        row_blocks += (p.segment[s].n_out + skinny_rows_of(EPI) - 1) / skinny_rows_of(EPI);
    }
    const bool wanted = mma == SkinnyMma::kWgmma ||
                        (mma == SkinnyMma::kByKnob && HP_CUDA_SKINNY_WGMMA_MIN_TOKENS > 0 && p.n_token >= HP_CUDA_SKINNY_WGMMA_MIN_TOKENS);
    const bool wgmma = wanted && skinny_wgmma_available();
    switch (token_tiles(p.n_token)) {
        case 1: launch_skinny_tokens<1, EPI>(p, row_blocks, wgmma, stream); break;
        case 2: launch_skinny_tokens<2, EPI>(p, row_blocks, wgmma, stream); break;
        case 4: launch_skinny_tokens<4, EPI>(p, row_blocks, wgmma, stream); break;
        default: launch_skinny_tokens<8, EPI>(p, row_blocks, wgmma, stream); break;
    }
}

}  // namespace hp_cuda_gemv
