// Staged decode GEMV (knob gemv_staged): the products and epilogues of gemv.cuh's gemv_kernel for
// one-token launches, built so that each SM streams contiguous weights and no launch boundary leaves
// DRAM idle.
//
// Why: timed alone, every clustered GEMV launch of a batch-1 step costs about 4 us on top of its bytes
// at ~3.5 TB/s (llama-3.2-1b: q/k/v 7.8 us for 12.6 MB, o_proj 6.5 us for 8.4 MB, bench/RESULTS.md),
// and a step has ~65 of them. The clustered kernel's blocks hold their weights in registers, so a
// launch issues loads only once the previous kernel's blocks have left the SMs.
//
// How: one block per SM (grid = SMs, or fewer for small matrices) owns a contiguous range of output
// rows, so its weights are one contiguous range per matrix (whole rows: no reduction across blocks).
// It streams them in order through a ring of kStages shared-memory stages of kStagedWeightBytes,
// copied by all its threads with cp.async (16 bytes each, no registers held, one commit group per
// stage). Before griddepcontrol.wait it issues every stage: ~100 KB per SM (13 MB over the GPU, all
// of q/k/v or o_proj at d_model 2048) are on chip or in flight when the previous kernel finishes,
// and the small footprint lets the next launch's blocks sit beside this one's and do the same.
// After the wait the token's activations go to shared memory, and each item (stage): every thread
// waits for its own copies (cp.async.wait_group), the block syncs, the stage consumed last is
// refilled kStages - 1 items ahead, and the warps take the item's 256-element pieces (see
// gemv_staged_kernel). Deterministic: fixed ranges, fixed order, no atomics.
//
// Measured (H200, batch-1 step ms; the clustered kernel: llama-3.2-1b 1.024, qwen3-30b-a3b 3.615):
// slower in every form tried, hence knob gemv_staged 0 by default. Stages of a 16-row tile's K-chunk
// (16 slices of 0.5-2 KB) with tensor-core products: bulk copies (cp.async.bulk, one per slice)
// 1.97, cp.async 1.74, more or larger stages 1.43-1.65. This form (contiguous items, CUDA cores):
// 1 block per SM x 6 stages of 16 KB 2.52, 2 x 5 x 16 KB 1.67 (qwen3 4.71), 4 x 4 x 8 KB 2.11 (5.17).
// Timed alone, every staged GEMV kind ran at ~1.3-1.6 TB/s, ~7 bytes per clock per SM, whether the
// SM held 48 or 128 KB in flight and in 1, 2 or 4 blocks: the limit is in the staging path, not
// in the bytes in flight or the DRAM pattern. Kept as a knob (and tested against the same host
// math as gemv_kernel) for other GPUs and as the starting point of a TMA-tensor or warp-specialised
// version.
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
// Elements of each matrix per item (stage): HP_CUDA_GEMV_STAGED_STAGE_KB of weights in all.
__host__ __device__ constexpr int staged_item(int m) { return kStagedWeightBytes / (2 * m); }

// Sum of the 8 products of two 16-byte runs of bf16 (widened exactly to float32), in a fixed order.
__device__ inline float dot8_bf16(uint4 w, uint4 x) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        sum = fmaf(__uint_as_float(wv[j] << 16), __uint_as_float(xv[j] << 16), sum);
        sum = fmaf(__uint_as_float(wv[j] & 0xffff0000u), __uint_as_float(xv[j] & 0xffff0000u), sum);
    }
    return sum;
}

// Asynchronous 16-byte global -> shared copies (cp.async, L1 bypassed) in per-thread commit groups.
__device__ inline void copy_async_16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
}
__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ inline void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A block's walk over its rows in items (stages): within a 16-row tile (which never crosses a segment
// or the block's range), whole rows while a row fits in a stage (kItem / n_in rows), else column
// slices of kItem. Every item is contiguous in each matrix.
template <int ITEM>
struct StagedCursor {
    int row;         // first row of the item, in the concatenated rows of the segments
    int col;         // first column
    int block_end;   // end of the block's rows
    int n_in;
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
    __device__ int rows() const { return n_in >= ITEM ? 1 : min(ITEM / n_in, tile_end - row); }
    __device__ int cols() const { return min(n_in, ITEM); }
    __device__ bool ends_tile() const { return row + rows() == tile_end && col + cols() == n_in; }
    __device__ void next(const Params &p, const int (&seg_begin)[kMaxSegments + 1]) {
        if ((col += cols()) < n_in) return;
        col = 0;
        const bool new_tile = (row += rows()) == tile_end;
        if (new_tile && !done()) start_tile(p, seg_begin);
    }
};

// The batch-1 kernel (one token). Warp w owns columns [256 w + 2048 j, + 256) of every row (n_in is a
// power of two, at least 2048), one 16-byte piece per lane: it adds its products of a row in a
// register across its pieces (and items), sums the row over its lanes when it reaches the row's last
// piece, and writes that partial to a ring of two tiles of per-warp partials; after the item that
// ends a tile and a block-wide sync, warp 0 adds the tile's partials in warp order and runs the
// shared epilogue while the other warps go on.
template <int EPI, bool NORM>
__global__ void __launch_bounds__(kStagedWarps * 32, kStagedBlocksPerSm) gemv_staged_kernel(const Params p, int unit_rows) {
    constexpr int M = EPI == kSiluMul ? 2 : 1, ITEM = staged_item(M), SB = M * ITEM * 2;
    extern __shared__ __align__(128) unsigned char stage_memory[];  // kStages stages, then x as bf16 [n_in]
    __shared__ float partial[2 * kTileRows][M][kStagedWarps];
    __shared__ float inv_rms_s;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_in = p.n_in;
    const __nv_bfloat16 *x_s = reinterpret_cast<const __nv_bfloat16 *>(stage_memory + kStages * SB);

    int seg_begin[kMaxSegments + 1];
    seg_begin[0] = 0;
#pragma unroll
    for (int s = 0; s < kMaxSegments; ++s) seg_begin[s + 1] = seg_begin[s] + (s < p.n_segment ? p.segment[s].n_out : 0);
    const int n_unit = (seg_begin[p.n_segment] + unit_rows - 1) / unit_rows;
    const int block_begin = int(int64_t(n_unit) * blockIdx.x / gridDim.x) * unit_rows;
    const int block_end = min(int(int64_t(n_unit) * (blockIdx.x + 1) / gridDim.x) * unit_rows, seg_begin[p.n_segment]);
    StagedCursor<ITEM> consumer{block_begin, 0, block_end, n_in};
    consumer.start_tile(p, seg_begin);
    StagedCursor<ITEM> producer = consumer;

    launch_dependents();
    if (kL2Prefetch) prefetch_l2(p.prefetch, blockIdx.x, gridDim.x);

    // All threads copy the producer's item into `stage` (16 bytes each in turn: each matrix's item is
    // contiguous) and commit one group, empty past the block's last item, so that group counts stay
    // in step with items.
    auto produce = [&](int stage) {
        if (!producer.done()) {
            const Segment &seg = p.segment[producer.seg];
            const int64_t at = int64_t(producer.row - seg_begin[producer.seg]) * n_in + producer.col;
            const int n_copy = producer.rows() * producer.cols() / 8;
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const __nv_bfloat16 *w = (m == 0 ? seg.w : seg.w2) + at;
                unsigned char *dst = stage_memory + stage * SB + m * ITEM * 2;
                for (int i = threadIdx.x; i < n_copy; i += kStagedWarps * 32) copy_async_16(dst + i * 16, w + i * 8);
            }
            producer.next(p, seg_begin);
        }
        copy_async_commit();
    };

    // Before the previous kernel is done: the weights of the first kStages items.
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) produce(s);
    wait_for_previous_grid();
    {  // the token's activations (the previous kernel's output) into shared memory
        const uint4 *x = reinterpret_cast<const uint4 *>(p.x + (p.x_rows ? int64_t(p.x_rows[0]) * n_in : 0));
        for (int i = threadIdx.x; i < n_in / 8; i += kStagedWarps * 32) reinterpret_cast<uint4 *>(stage_memory + kStages * SB)[i] = x[i];
    }
    if constexpr (NORM) {
        if (warp == 0) {
            const float *part = p.x_sum_sq + (p.x_rows ? int64_t(p.x_rows[0]) * p.n_sum_sq : 0);
            float total = 0.0f;
            for (int i = lane; i < p.n_sum_sq; i += 32) total += part[i];
            for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
            if (lane == 0) inv_rms_s = rsqrtf(total / float(n_in) + p.norm_eps);
        }
    }

    // The tile whose partials are complete after the next sync (done.tile < 0: none).
    StagedCursor<ITEM> done = consumer;
    done.tile = -1;
    auto finish_tile = [&] {
        if (warp != 0 || done.tile < 0) return;
        const Segment &seg = p.segment[done.seg];
        const int row0 = done.tile_row - seg_begin[done.seg], r = lane % kTileRows, row = row0 + r;
        const int slot = done.slot(done.tile_row + r);
        float sum[M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            sum[m] = 0.0f;
#pragma unroll
            for (int w = 0; w < kStagedWarps; ++w) sum[m] += partial[slot][m][w];
            if constexpr (NORM) sum[m] *= inv_rms_s;
        }
        const bool token = lane < kTileRows;  // lanes 16..31 stand for a second token, absent
        store_element<EPI, M>(p, seg, 0, row, row0 / kTileRows, token && row < done.tile_end - seg_begin[done.seg], token && r == 0, sum);
    };

    float acc[M] = {};
    for (int item = 0; !consumer.done(); ++item) {
        copy_async_wait<kStages - 2>();  // groups issued after this item's: the kStages - 2 refills since
        __syncthreads();                 // every thread's copies have landed; the previous stage and tile are free
        finish_tile();
        done.tile = -1;
        if (item > 0) produce((item - 1) % kStages);
        const unsigned char *w_stage = stage_memory + item % kStages * SB;
        const int cols = consumer.cols(), n_piece = consumer.rows() * cols / 256;
        for (int piece = warp; piece < n_piece; piece += kStagedWarps) {
            const int r = piece * 256 / cols, col = consumer.col + piece * 256 % cols + lane * 8;
            const uint4 xv = *reinterpret_cast<const uint4 *>(x_s + col);
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const uint4 wv = *reinterpret_cast<const uint4 *>(w_stage + m * ITEM * 2 + piece * 512 + lane * 16);
                acc[m] += dot8_bf16(wv, xv);
            }
            if (col - lane * 8 + 2048 >= n_in) {  // the warp's last piece of this row
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float total = acc[m];
                    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
                    if (lane == 0) partial[consumer.slot(consumer.row + r)][m][warp] = total;
                    acc[m] = 0.0f;
                }
            }
        }
        if (consumer.ends_tile()) done = consumer;
        consumer.next(p, seg_begin);
    }
    copy_async_wait<0>();
    __syncthreads();
    finish_tile();
}

// SMs of the current device (asked once per process and device).
inline int staged_sm_count() {
    static int count[64] = {};
    int device = 0;
    cudaGetDevice(&device);
    if (device < 0 || device >= 64) return 132;
    if (!count[device]) cudaDeviceGetAttribute(&count[device], cudaDevAttrMultiProcessorCount, device);
    return count[device] > 0 ? count[device] : 132;
}

// Whether the staged kernel takes a launch: one token, n_in a power of two of at least 2048 (warps own
// fixed columns of every row), x of at most 32 KB, 16-byte aligned operands.
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
    const int grid = std::min(n_unit, kStagedBlocksPerSm * staged_sm_count());
    if (grid <= 0) return;
    void (*kernel)(Params, int) = p.x_sum_sq ? gemv_staged_kernel<EPI, true> : gemv_staged_kernel<EPI, false>;
    const size_t shared = size_t(kStages) * size_t(kStagedWeightBytes) + size_t(p.n_in) * 2;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStages * kStagedWeightBytes + 32768));
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(kStagedWarps * 32), shared, stream, p, unit_rows);
}

}  // namespace hp_cuda_gemv
