// Staged decode GEMV (knob gemv_staged): the products and epilogues of gemv.cuh's gemv_kernel for
// one-token launches, built so that each SM streams contiguous weights and no launch boundary leaves
// DRAM idle.
//
// Why: timed alone, every clustered GEMV launch of a batch-1 step costs about 4 us on top of its bytes
// at ~3.5 TB/s (llama-3.2-1b: q/k/v 7.8 us for 12.6 MB, o_proj 6.5 us for 8.4 MB, bench/RESULTS.md),
// and a step has ~65 of them. The clustered kernel's blocks hold their weights in registers, so a
// launch issues loads only once the previous kernel's blocks have left the SMs.
//
// How: gemv_staged_blocks_per_sm blocks per SM (fewer for small matrices), each owning a contiguous
// range of output rows, so its weights are one contiguous range per matrix (whole rows: no reduction
// across blocks). A block streams them in order through a ring of kStages shared-memory stages of
// kStagedWeightBytes, one bulk asynchronous copy (cp.async.bulk, the TMA engine) per matrix and
// stage, an mbarrier per stage. Before griddepcontrol.wait it issues every stage: ~100 KB per SM
// (13 MB over the GPU, all of q/k/v or o_proj at d_model 2048) are on chip or in flight when the
// previous kernel finishes, and the small footprint lets the next launch's blocks sit beside this
// one's and do the same. After the wait the token's activations go to shared memory; per item each
// warp takes one contiguous range of the stage (within one row), and after a block-wide sync the
// stage is refilled kStages items ahead (see gemv_staged_kernel). Deterministic: fixed ranges,
// fixed order, no atomics.
//
// Measured (H200, batch-1 step ms; the clustered kernel: llama-3.2-1b 1.02-1.03, qwen3-30b-a3b 3.62),
// hence knob gemv_staged 0 by default. This form, every one-token GEMV staged: 1 block per SM x 6
// stages of 16 KB 1.208 (qwen3 4.52), 4 stages 1.213, 2 blocks x 5 stages 1.039 (3.78); store and
// accumulate only 1.326, accumulate only 1.287, store only 1.41. Timed alone (each kind relaunched
// as a graph), the staged kinds match the clustered ones (o_proj + down 0.321 against 0.326 ms a
// step, gate/up 0.388 against 0.380, q/k/v + lm_head 0.274 against 0.271), but a step of them
// overlaps less: the clustered step takes 0.12 ms less than its kinds alone, the staged one 0.05
// more; mixing the two kernels is worse than either. Earlier forms were slower: a 16-row tile's
// K-chunks as stages (slices of 0.5-2 KB, tensor cores) 1.43-1.97; contiguous items with strided
// 256-element pieces per warp, a lane reduction per piece and cp.async per thread 1.67-2.52. The
// copy paths themselves are not the limit: bench/gpu/stream_probe.cu streams 1 GiB at 4.20 TB/s by
// bulk copies and 3.98 by cp.async with one block per SM. Kept as a knob (and tested against the
// same host math as gemv_kernel) for other GPUs and as the base of a persistent or
// warp-specialised version.
//
// Rows per block: the segments' rows are concatenated and cut into grid-many equal ranges, in units
// of one row, or of 16-row tiles when the epilogue writes the folded norm's per-tile sums of x^2
// (norm_out; one segment). A tile (up to 16 rows) never crosses a segment or the block's range.
// Requires: one token, n_in a power of two from 2048 to 16384, 16-byte aligned operands (the launcher
// falls back to gemv_kernel otherwise).
// Included by gemv.cuh, after its kernel (it uses Params, WarpPartials, store_element, launch_pdl).
#pragma once

namespace hp_cuda_gemv {

constexpr int kStagedWarps = 8;                                          // warps per block
constexpr int kStagedBlocksPerSm = HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM;    // blocks of the grid per SM
constexpr int kStages = HP_CUDA_GEMV_STAGED_STAGES;                     // stages of the ring
constexpr int kStagedWeightBytes = HP_CUDA_GEMV_STAGED_STAGE_KB * 1024;  // weight bytes per stage (both matrices)

// mbarrier and bulk-copy primitives (sm_90).
__device__ inline uint32_t shared_address(const void *ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }
__device__ inline void mbarrier_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
__device__ inline void mbarrier_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}
__device__ inline void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}
__device__ inline void mbarrier_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(parity)
        : "memory");
}
// One bulk asynchronous copy (the TMA engine) of `bytes` (a multiple of 16, both ends 16-byte
// aligned) from global to shared memory; its bytes count towards `bar`'s current phase.
__device__ inline void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(dst)), "l"(src),
                 "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}

// A block's walk over its rows in items (stages): within a 16-row tile (which never crosses a segment
// or the block's range), whole rows while a row fits in an item (item / n_in rows), else column
// slices of `item` elements. Every item is contiguous in each matrix. n_in and item are powers of two.
struct StagedCursor {
    int row;         // first row of the item, in the concatenated rows of the segments
    int col;         // first column
    int block_end;   // end of the block's rows
    int log_in;      // log2(n_in)
    int item;        // elements of each matrix per item
    int seg = 0;     // the item's segment
    int tile = -1;   // its tile: index in the block, first row, end
    int tile_row = 0, tile_end = 0;

    __device__ void start_tile(const Params &p, const int (&seg_begin)[kMaxSegments + 1]) {
        while (seg + 1 < p.n_segment && row >= seg_begin[seg + 1]) ++seg;
        ++tile;
        tile_row = row;
        tile_end = min(min(row + kTileRows, seg_begin[seg + 1]), block_end);
    }
    __device__ int slot(int r) const { return tile % 2 * kTileRows + r - tile_row; }  // row r's partials in the ring of two tiles
    __device__ bool done() const { return row >= block_end; }
    __device__ int n_in() const { return 1 << log_in; }
    __device__ int rows() const { return n_in() >= item ? 1 : min(item >> log_in, tile_end - row); }
    __device__ int cols() const { return min(n_in(), item); }
    __device__ bool ends_tile() const { return row + rows() == tile_end && col + cols() == n_in(); }
    __device__ void next(const Params &p, const int (&seg_begin)[kMaxSegments + 1]) {
        if ((col += cols()) < n_in()) return;
        col = 0;
        const bool new_tile = (row += rows()) == tile_end;
        if (new_tile && !done()) start_tile(p, seg_begin);
    }
};

// The first row of each segment in the concatenated rows, and their end.
__device__ inline void segment_begins(const Params &p, int (&seg_begin)[kMaxSegments + 1]) {
    seg_begin[0] = 0;
#pragma unroll
    for (int s = 0; s < kMaxSegments; ++s) seg_begin[s + 1] = seg_begin[s] + (s < p.n_segment ? p.segment[s].n_out : 0);
}

// Block `block` of n_block takes rows [begin, end) of the concatenated segments: equal shares in units
// of unit_rows rows (16 when the epilogue writes per-tile sums of x^2).
__device__ inline void staged_block_rows(int total_rows, int unit_rows, int block, int n_block, int &begin, int &end) {
    const int n_unit = (total_rows + unit_rows - 1) / unit_rows;
    begin = int(int64_t(n_unit) * block / n_block) * unit_rows;
    end = min(int(int64_t(n_unit) * (block + 1) / n_block) * unit_rows, total_rows);
}

// The producing side of a staged ring (one thread): a block's items of one GEMV in order, each as one
// bulk copy per matrix into a stage of stage_bytes (m matrices of stage_bytes / (2 m) elements).
struct StagedProducer {
    const Params *p = nullptr;
    StagedCursor cursor{0, 0, 0, 0, 1};
    int seg_begin[kMaxSegments + 1] = {};
    int m = 1;

    __device__ void start(const Params &params, int matrices, int unit_rows, int stage_bytes) {
        p = &params;
        m = matrices;
        segment_begins(params, seg_begin);
        int begin, end;
        staged_block_rows(seg_begin[params.n_segment], unit_rows, blockIdx.x, gridDim.x, begin, end);
        cursor = StagedCursor{begin, 0, end, 31 - __clz(params.n_in), stage_bytes / (2 * matrices)};
        if (!cursor.done()) cursor.start_tile(params, seg_begin);
    }
    __device__ bool done() const { return cursor.done(); }
    // The next item: its first element in each matrix, and its bytes per matrix; the cursor moves on.
    __device__ uint32_t take(const __nv_bfloat16 *(&src)[2]) {
        const Segment &seg = p->segment[cursor.seg];
        const int64_t at = (int64_t(cursor.row - seg_begin[cursor.seg]) << cursor.log_in) + cursor.col;
        const uint32_t bytes = uint32_t(cursor.rows() * cursor.cols() * 2);
        src[0] = seg.w + at;
        src[1] = m == 2 ? seg.w2 + at : nullptr;
        cursor.next(*p, seg_begin);
        return bytes;
    }
    // The next item into `stage`; its bytes complete `bar`'s phase.
    __device__ void produce(unsigned char *stage, uint64_t *bar) {
        const __nv_bfloat16 *src[2];
        const int item = cursor.item;
        const uint32_t bytes = take(src);
        mbarrier_arrive_expect_tx(bar, m * bytes);
        bulk_copy(stage, src[0], bytes, bar);
        if (m == 2) bulk_copy(stage + item * 2, src[1], bytes, bar);
    }
    // The next item into L2 only (bulk prefetch, no completion to wait for).
    __device__ void prefetch_l2() {
        const __nv_bfloat16 *src[2];
        const uint32_t bytes = take(src);
        for (int k = 0; k < m; ++k) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src[k]), "r"(bytes) : "memory");
    }
};

// Floats of the staged consumer's partial sums for stages of STAGE_BYTES: per row slot (two tiles of
// 16 rows), matrix and warp range (n_in at most 16384).
template <int STAGE_BYTES>
constexpr int kStagedPartials = 2 * kTileRows * 2 * (16384 / (STAGE_BYTES / 4 / kStagedWarps));

// The consuming side of a staged ring (all kStagedWarps warps of the block): the block's items of one
// GEMV, rows [block_begin, block_end) of p's segments, from a ring of STAGES stages of STAGE_BYTES
// whose items are numbered on from `item` (stage item % STAGES, phase item / STAGES). Each item is
// split into kStagedWarps ranges of ITEM / kStagedWarps elements, warp w taking range w: where it lies
// within one row (n_in >= the range) the warp's dot product over it is one register per lane,
// summed over the lanes once, and written as partial [row's slot][m][range index within the row];
// where n_in is smaller (a power of two from 256) the range holds whole rows, one partial each.
// After its share of an item every consumer warp calls release(stage) (the staged kernel syncs the
// block there and refills the stage; the persistent step arrives on the stage's empty barrier); at
// the end of a tile the warps call tile_sync() (a barrier of the consumer warps, or nothing where
// release synced them), then warp 0 adds the tile's partials in range order and runs the shared
// epilogue while the other warps go on (the next tile's partials go to the other half of the ring;
// a warp cannot reach the tile after that before warp 0 has joined the next tile_sync).
// x_s: the token's activations (bf16 [n_in]) in shared memory; inv_rms: the folded norm's 1/rms.
// Deterministic: fixed ranges, fixed order, no atomics.
template <int EPI, bool NORM, int STAGES, int STAGE_BYTES, typename Release, typename TileSync>
__device__ void staged_consume(const Params &p, const int (&seg_begin)[kMaxSegments + 1], int block_begin, int block_end,
                               const unsigned char *ring, uint64_t *full, const __nv_bfloat16 *x_s, float inv_rms, float *partial,
                               int &item, Release &&release, TileSync &&tile_sync) {
    constexpr int M = EPI == kSiluMul ? 2 : 1, ITEM = STAGE_BYTES / (2 * M);
    constexpr int RANGE = ITEM / kStagedWarps, kMaxRanges = 16384 / RANGE;
    static_assert(RANGE % 256 == 0 && RANGE <= 2048, "a warp's range: whole 256-element pieces");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_in = p.n_in, log_in = 31 - __clz(n_in);
    StagedCursor consumer{block_begin, 0, block_end, log_in, ITEM};
    if (consumer.done()) return;
    consumer.start_tile(p, seg_begin);
    for (; !consumer.done(); ++item) {
        const int stage = item % STAGES;
        mbarrier_wait(&full[stage], uint32_t(item / STAGES) & 1u);
        const int e0 = warp * RANGE, log_cols = min(log_in, 31 - __clz(ITEM)), n_elem = consumer.rows() * consumer.cols();
        if (e0 < n_elem) {
            const int col = consumer.col + (e0 & ((1 << log_cols) - 1));  // of the range's first element; n_in < RANGE: 0
            const unsigned char *w_stage = ring + stage * STAGE_BYTES + e0 * 2 + lane * 16;
            float dot[M] = {};
            if (n_in >= RANGE) {  // the range lies within one row: one partial
                const int r = consumer.row + (e0 >> log_cols);
                const __nv_bfloat16 *x = x_s + col + lane * 8;
#pragma unroll
                for (int piece = 0; piece < RANGE / 256; ++piece) {
                    const uint4 xv = *reinterpret_cast<const uint4 *>(x + piece * 256);
#pragma unroll
                    for (int m = 0; m < M; ++m) dot[m] += dot_chunk(0.0f, *reinterpret_cast<const uint4 *>(w_stage + m * ITEM * 2 + piece * 512), xv);
                }
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    for (int offset = 16; offset > 0; offset /= 2) dot[m] += __shfl_xor_sync(0xffffffffu, dot[m], offset);
                    if (lane == 0) partial[(consumer.slot(r) * M + m) * kMaxRanges + col / RANGE] = dot[m];
                }
            } else {  // the range holds whole rows, one partial each
#pragma unroll
                for (int piece = 0; piece < RANGE / 256; ++piece) {
                    const int e = e0 + piece * 256;
                    if (e < n_elem) {
                        const uint4 xv = *reinterpret_cast<const uint4 *>(x_s + consumer.col + (e & ((1 << log_cols) - 1)) + lane * 8);
#pragma unroll
                        for (int m = 0; m < M; ++m) dot[m] += dot_chunk(0.0f, *reinterpret_cast<const uint4 *>(w_stage + m * ITEM * 2 + piece * 512), xv);
                    }
                    // A row ends with this piece (n_in < RANGE: the range holds several rows, each its own partial).
                    if (piece + 1 == RANGE / 256 || ((e + 256) & (n_in - 1)) == 0) {
#pragma unroll
                        for (int m = 0; m < M; ++m) {
                            for (int offset = 16; offset > 0; offset /= 2) dot[m] += __shfl_xor_sync(0xffffffffu, dot[m], offset);
                            if (lane == 0 && e < n_elem) partial[(consumer.slot(consumer.row + (e >> log_cols)) * M + m) * kMaxRanges + col / RANGE] = dot[m];
                            dot[m] = 0.0f;
                        }
                    }
                }
            }
        }
        const bool ends_tile = consumer.ends_tile();
        const StagedCursor tile = consumer;
        consumer.next(p, seg_begin);
        release(stage);
        if (!ends_tile) continue;
        tile_sync();
        if (warp == 0) {  // the tile's outputs: partials in range order, then the epilogue
            const Segment &seg = p.segment[tile.seg];
            const int r = lane % kTileRows, row0 = tile.tile_row - seg_begin[tile.seg], row = row0 + r;
            float sum[M];
#pragma unroll
            for (int m = 0; m < M; ++m) {
                sum[m] = 0.0f;
                for (int j = 0; j < (n_in + RANGE - 1) / RANGE; ++j) sum[m] += partial[(tile.slot(tile.tile_row + r) * M + m) * kMaxRanges + j];
                if constexpr (NORM) sum[m] *= inv_rms;
            }
            const bool token = lane < kTileRows;  // lanes 16..31 stand for a second token, absent
            store_element<EPI, M>(p, seg, 0, row, row0 / kTileRows, token && row < tile.tile_end - seg_begin[tile.seg], token && r == 0, sum);
        }
    }
}

// The one-token kernel: the producer (thread 0) issues the first kStages items before
// griddepcontrol.wait, then the block loads the token's activations and consumes its items.
template <int EPI, bool NORM>
__global__ void __launch_bounds__(kStagedWarps * 32, kStagedBlocksPerSm) gemv_staged_kernel(const __grid_constant__ Params p, int unit_rows) {
    constexpr int M = EPI == kSiluMul ? 2 : 1;
    extern __shared__ __align__(128) unsigned char stage_memory[];  // kStages stages, then x as bf16 [n_in]
    __shared__ float partial[kStagedPartials<kStagedWeightBytes>];
    __shared__ __align__(8) uint64_t full[kStages];
    __shared__ float inv_rms_s;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_in = p.n_in;
    __nv_bfloat16 *x_s = reinterpret_cast<__nv_bfloat16 *>(stage_memory + kStages * kStagedWeightBytes);

    int seg_begin[kMaxSegments + 1];
    segment_begins(p, seg_begin);
    int block_begin, block_end;
    staged_block_rows(seg_begin[p.n_segment], unit_rows, blockIdx.x, gridDim.x, block_begin, block_end);
    StagedProducer producer;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    launch_dependents();
    if (kL2Prefetch) prefetch_l2(p.prefetch, blockIdx.x, gridDim.x);

    // Before the previous kernel is done: the weights of the first kStages items.
    auto refill = [&](int stage) {
        if (!producer.done()) producer.produce(stage_memory + stage * kStagedWeightBytes, &full[stage]);
    };
    auto release = [&](int stage) {  // the whole block: the stage is consumed, the item's partials written
        __syncthreads();
        if (threadIdx.x == 0) refill(stage);
    };
    if (threadIdx.x == 0) {
        producer.start(p, M, unit_rows, kStagedWeightBytes);
        for (int s = 0; s < kStages; ++s) refill(s);
    }
    wait_for_previous_grid();
    {  // the token's activations (the previous kernel's output) into shared memory
        const uint4 *x = reinterpret_cast<const uint4 *>(p.x + (p.x_rows ? int64_t(p.x_rows[0]) * n_in : 0));
        for (int i = threadIdx.x; i < n_in / 8; i += kStagedWarps * 32) reinterpret_cast<uint4 *>(x_s)[i] = x[i];
    }
    if constexpr (NORM) {
        if (warp == 0) {
            const float inv_rms = warp_inv_rms(p.x_sum_sq + (p.x_rows ? int64_t(p.x_rows[0]) * p.n_sum_sq : 0), p.n_sum_sq, n_in, p.norm_eps);
            if (lane == 0) inv_rms_s = inv_rms;
        }
    }
    __syncthreads();
    int item = 0;
    staged_consume<EPI, NORM, kStages, kStagedWeightBytes>(p, seg_begin, block_begin, block_end, stage_memory, full, x_s,
                                                            NORM ? inv_rms_s : 1.0f, partial, item, release, [] {});
}

// Whether the staged kernel takes a launch: one token, n_in a power of two from 2048 to 16384 (a warp's
// range of a stage lies within one row; x is at most 32 KB), 16-byte aligned operands.
inline bool staged_fits(const Params &p, int epi) {
    const bool power_of_two = p.n_in >= 2048 && p.n_in <= 16384 && (p.n_in & (p.n_in - 1)) == 0;
    if (p.n_token != 1 || !power_of_two || !aligned16(p.x)) return false;
    if (p.norm_out.h && p.n_segment != 1) return false;
    for (int s = 0; s < p.n_segment; ++s) {
        if (!aligned16(p.segment[s].w) || (epi == kSiluMul && !aligned16(p.segment[s].w2))) return false;
    }
    return true;
}

// Launches the staged kernel on `stream` (the caller checked staged_fits): gemv_staged_blocks_per_sm
// blocks per SM, or one per unit of rows when there are fewer.
template <int EPI>
void launch_staged(const Params &p, cudaStream_t stream) {
    int rows = 0;
    for (int s = 0; s < p.n_segment; ++s) rows += p.segment[s].n_out;
    const int unit_rows = p.norm_out.h ? kTileRows : 1, n_unit = (rows + unit_rows - 1) / unit_rows;
    const int grid = std::min(n_unit, kStagedBlocksPerSm * device_sm_count());
    if (grid <= 0) return;
    void (*kernel)(Params, int) = p.x_sum_sq ? gemv_staged_kernel<EPI, true> : gemv_staged_kernel<EPI, false>;
    const size_t shared = size_t(kStages) * size_t(kStagedWeightBytes) + size_t(p.n_in) * 2;  // the ring, then x
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStages * kStagedWeightBytes + 32768));
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(kStagedWarps * 32), shared, stream, p, unit_rows);
}

}  // namespace hp_cuda_gemv
