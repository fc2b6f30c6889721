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
// default knobs) without holding them in registers, and
// the activations are read from L2 once per block: activation traffic is weights x tokens / R
// instead of weights x tokens / 16. Each warp then multiplies its rows from shared memory:
// lane (g, q) takes inputs [8 q, 8 q + 8) of a 32-input step of rows g and g + 8 and of token g,
// which are its A and B fragments of two m16n8k16 products if the inputs of a product are taken in
// the order the lanes hold them (as in gemv.cuh). Rows are padded so that the 8 lanes of a
// quarter-warp's 16-byte loads (two rows, four pieces each) hit distinct banks.
//
// Partial sums: each block writes its warps' accumulators to shared memory; the cluster's blocks
// then add the cluster's partials in rank order (distributed shared memory: deterministic, no
// atomics) and run gemv.cuh's epilogue (store_element), block `rank` for its share of the tokens,
// so the folded norm's 1/rms is summed only for the tokens a block stores. Takes aligned operands
// with n_in a multiple of 8 and up to 64 tokens (skinny_fits); rows past n_out and inputs past n_in
// are copied as zeros.
#pragma once

namespace hp_cuda_gemv {

constexpr int kSkinnyWarps = HP_CUDA_SKINNY_WARPS;
constexpr int kSkinnyTiles = HP_CUDA_SKINNY_TILES;    // 16-row tiles per warp (store, accumulate)
constexpr int kSkinnyUnroll = HP_CUDA_SKINNY_UNROLL;  // 32-input steps per chunk
constexpr int kSkinnyStages = HP_CUDA_SKINNY_STAGES;  // chunks in the shared-memory ring
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
__host__ __device__ constexpr int skinny_stage_elements(int epi, int n_tokens) {
    return (kSkinnyWarps * skinny_matrix_tiles(epi) * kTileRows + n_tokens) * kSkinnyPitch;
}
// Shared memory of a block: the ring, later reused for the partial sums ([warp][matrix tile][token]
// [row]), then 1/rms per token.
__host__ __device__ constexpr size_t skinny_shared_bytes(int epi, int n_tokens) {
    const size_t ring = size_t(kSkinnyStages) * skinny_stage_elements(epi, n_tokens) * 2;
    const size_t partials = size_t(kSkinnyWarps) * skinny_matrix_tiles(epi) * n_tokens * kTileRows * 4;
    return (ring > partials ? ring : partials) + size_t(n_tokens) * 4;
}

static_assert(skinny_shared_bytes(kStore, kMaxTokens) <= 232448 && skinny_shared_bytes(kSiluMul, kMaxTokens) <= 232448,
              "skinny GEMM: the ring of skinny_stages chunks exceeds 227 KB of shared memory at 64 tokens");

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

// Grid (cluster, row blocks of all segments, 1), launched as clusters of gridDim.x blocks that split
// the inputs in whole chunks. NB tiles of 8 tokens; NORM: scaled by 1/rms from x_sum_sq.
template <int NB, int EPI, bool NORM>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_kernel(const Params p) {
    constexpr int M = skinny_matrix_tiles(EPI), U = kSkinnyUnroll, NT = NB * 8, S = kSkinnyStages;
    constexpr int R = skinny_rows_of(EPI), kTiles = R / kTileRows;  // output rows and 16-row tiles of the block
    constexpr int kWeightRows = kSkinnyWarps * M * kTileRows;         // weight rows of a stage
    constexpr int kPiecesPerRow = kSkinnyChunk / 8;                    // 16-byte pieces of a row's chunk
    extern __shared__ uint4 skinny_shared[];
    __nv_bfloat16 *ring = reinterpret_cast<__nv_bfloat16 *>(skinny_shared);
    float *partial = reinterpret_cast<float *>(skinny_shared);  // after the main loop
    float *inv_rms_s = reinterpret_cast<float *>(reinterpret_cast<char *>(skinny_shared) + skinny_shared_bytes(EPI, NT) - NT * 4);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    Segment seg = p.segment[0];
    if (p.n_segment > 1 && int(blockIdx.y) >= p.segment[1].first_block) seg = p.segment[1];
    if (p.n_segment > 2 && int(blockIdx.y) >= p.segment[2].first_block) seg = p.segment[2];
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
    const int piece = threadIdx.x % P, first_row = threadIdx.x / P;
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
    constexpr uint32_t kStageBytes = uint32_t(skinny_stage_elements(EPI, NT)) * 2u;
    const uint32_t w_dst = ring_address + uint32_t(first_row * kSkinnyPitch + piece * 8) * 2u;
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
            copy(w_dst + stage * kStageBytes + uint32_t(k * kRowsPerPass * kSkinnyPitch) * 2u, valid ? w_src[k] + kc * kSkinnyChunk : seg.w, valid);
        }
    };
    // Chunk kc's activations of the NT tokens (zeros past n_t and n_in) into stage `stage`; the
    // token rows are set after the wait (x_rows may be the previous kernel's output).
    const __nv_bfloat16 *x_src[kTokenPasses];
    bool x_valid[kTokenPasses];
    const uint32_t x_dst = w_dst + uint32_t(kWeightRows * kSkinnyPitch) * 2u;
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
            copy(x_dst + stage * kStageBytes + uint32_t(k * kRowsPerPass * kSkinnyPitch) * 2u, valid ? x_src[k] + kc * kSkinnyChunk : p.x, valid);
        }
    };

    float acc[M][NB][4] = {};

    // The first S - 1 chunks' weights before the wait (weights are never written during a step), their
    // activations after it; one commit group per chunk (the first also holds the early weights).
    launch_dependents();
    if (kL2Prefetch) prefetch_l2(p.prefetch, linear_block(), grid_blocks());
    for (int s = 0; s < S - 1 && s < n_local; ++s) load_weights(s, kc_begin + s);
    wait_for_previous_grid();  // the activations (and a residual) are the previous kernel's output
    set_token_rows();
    for (int s = 0; s < S - 1; ++s) {
        if (s < n_local) load_activations(s, kc_begin + s);
        cp_async_commit();
    }

    // This block's share of the tokens in the epilogue, and their 1/rms (NORM).
    const int per_rank = (n_t + gridDim.x - 1) / gridDim.x;
    const int t_lo = min(n_t, int(blockIdx.x) * per_rank), t_hi = min(n_t, t_lo + per_rank);
    if constexpr (NORM) {
        for (int t = t_lo + warp; t < t_hi; t += kSkinnyWarps) {
            const float inv = warp_inv_rms(p.x_sum_sq + int64_t(p.x_rows ? p.x_rows[t] : t) * p.n_sum_sq, p.n_sum_sq, n_in, p.norm_eps);
            if (lane == 0) inv_rms_s[t] = inv;
        }
    }

    for (int i = 0; i < n_local; ++i) {
        cp_async_wait<S - 2>();  // chunk i has landed (this thread's copies) ...
        __syncthreads();         // ... everyone's, and every warp is done with chunk i - 1's stage
        if (i + S - 1 < n_local) {
            load_weights((i + S - 1) % S, kc_begin + i + S - 1);
            load_activations((i + S - 1) % S, kc_begin + i + S - 1);
        }
        cp_async_commit();  // possibly empty: one group per iteration keeps the count
        const __nv_bfloat16 *w_chunk = ring + (i % S) * skinny_stage_elements(EPI, NT);
        const __nv_bfloat16 *x_chunk = w_chunk + kWeightRows * kSkinnyPitch;
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
    cp_async_wait<0>();
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
        // lead: the tile's first row, which exists (tiles wholly past n_out write no sum of squares)
        store_element<EPI, MS>(p, seg, unit.t, unit.row, unit.row / kTileRows, unit.active, unit.active && r == 0, sum, prior);
        unit = next;
        prior = next_prior;
    }
    cluster.sync();  // keep every block's shared memory alive until the cluster has read it
}

// Blocks per cluster: the fewest (a power of two up to 8) that give at least
// HP_CUDA_SKINNY_TARGET_BLOCKS blocks over all row blocks, keeping four chunks per block on average
// (the last blocks of a cluster may get fewer, or none).
inline int skinny_cluster_size(int row_blocks, int n_in) {
    const int n_kc = (n_in + kSkinnyChunk - 1) / kSkinnyChunk;
    int size = 1;
    while (size < 8 && row_blocks * size < HP_CUDA_SKINNY_TARGET_BLOCKS && 4 * size <= n_kc) size *= 2;
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

template <int NB, int EPI>
void launch_skinny_tokens(const Params &p, dim3 grid, cudaStream_t stream) {
    void (*kernel)(Params) = p.x_sum_sq ? skinny_kernel<NB, EPI, true> : skinny_kernel<NB, EPI, false>;
    const size_t bytes = skinny_shared_bytes(EPI, NB * 8);
    if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    launch_pdl_clustered(kernel, grid, dim3(kSkinnyWarps * 32), bytes, grid.x, stream, p);
}

// Launches the skinny kernel on `stream` (the caller checked skinny_fits). EPI is the same for
// every segment.
template <int EPI>
void launch_skinny(Params p, cudaStream_t stream) {
    if (p.n_token <= 0 || p.n_segment <= 0) return;
    int row_blocks = 0;
    for (int s = 0; s < p.n_segment; ++s) {
        p.segment[s].first_block = row_blocks;
        row_blocks += (p.segment[s].n_out + skinny_rows_of(EPI) - 1) / skinny_rows_of(EPI);
    }
    const dim3 grid(unsigned(skinny_cluster_size(row_blocks, p.n_in)), unsigned(row_blocks), 1);
    switch (token_tiles(p.n_token)) {
        case 1: launch_skinny_tokens<1, EPI>(p, grid, stream); break;
        case 2: launch_skinny_tokens<2, EPI>(p, grid, stream); break;
        case 4: launch_skinny_tokens<4, EPI>(p, grid, stream); break;
        default: launch_skinny_tokens<8, EPI>(p, grid, stream); break;
    }
}

}  // namespace hp_cuda_gemv
