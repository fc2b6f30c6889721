// Knob attn_fd_oproj: o_proj done by the single-token attention's clustered blocks (attention.cuh),
// so that a one-token decode step (batch 1) has no o_proj launch and no dependent-launch boundary
// between the attention and the FFN.
//
// The splits of kv head g run as one cluster of n_split blocks (attn_fd_cluster); block `split` of it
// owns rows [split * R, (split + 1) * R) of o_proj (R = d_model / n_split) and g's columns, the
// group * D attention outputs of g's query heads. Before griddepcontrol.wait each block asks for that
// R x group * D slice of the weights (128 KB at llama-3.2-1b's 2048 / 8 rows x 4 x 64 columns) into
// its dynamic shared memory, by cp.async (knob value 1) or by bulk copies (2), so the weights stream
// while the q/k/v projection finishes and the block waits, attends and reduces. After the cluster's
// combination every block pushes its share of g's outputs, rounded to bf16 as the o_proj GEMV would
// read them, to every block of the cluster; after a second cluster barrier each block multiplies its
// slice by g's outputs (a warp takes 32 rows, each lane 8 columns at a time, then a reduce-scatter
// over the lanes leaves row r0 + lane's sum in lane `lane`) and writes that kv head's partial of its
// rows. The last of the n_head_kv blocks of a row range to arrive (atomic counter, set back to zero
// for the next step) adds the kv heads' partials in kv-head order, then the bias and the residual, and
// writes what the o_proj GEMV's accumulate epilogue writes (gemv.cuh store_element): x, and with
// norm_out the next norm's operand h = bf16(x * w) and the sums of x^2 per 16-row tile. Deterministic:
// the same sums in the same order whichever block arrives last. Not the GEMV's summation order, so not
// its bits.
//
// Only for one token, PREFETCH blocks in clusters, one block a GQA group (attention.cuh; the host's
// attention_folds_oproj checks the rest: a slice that fits shared memory, R a multiple of 32).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include <hotpass/forward_abi.h>

#include "attention_step.cuh"
#include "gemv.cuh"
#include "knobs.h"

namespace hp_cuda_baseline {

constexpr bool kFdOProj = HP_CUDA_ATTN_FD_OPROJ != 0;
constexpr int kFdOProjMode = kFdOProj ? HP_CUDA_ATTN_FD_OPROJ : 1;  // the plugin's OPROJ kernels' template argument (compiled only with the knob on)

// What the kernel needs to do o_proj (null w: not folded; the kernel writes its bf16 output for the
// o_proj launch).
struct FdOProj {
    const __nv_bfloat16 *w = nullptr;  // o_proj's weights, bf16 [d_model][n_head * d_head], row-major
    const void *bias = nullptr;        // optional [d_model], bias_dtype
    hp_dtype bias_dtype = HP_DTYPE_F32;
    float *x = nullptr;                // the residual, f32 [d_model] (the step's one token): x += o_proj(attention) + bias
    hp_cuda_gemv::NormOut norm_out;    // optional (null h): the next norm's operand and sums of x^2, as the o_proj GEMV writes them
    float *partial = nullptr;          // f32 [n_head_kv][d_model]: each kv head's product, per row
    int32_t *counters = nullptr;       // [n_split]: arrivals per row range, zero between steps
    int d_model = 0;
};

// Rows and columns of a block's slice, and its bytes (the kernel's dynamic shared memory).
__host__ __device__ constexpr int fd_oproj_rows(int d_model, int n_split) { return d_model / n_split; }
__host__ __device__ constexpr size_t fd_oproj_shared_bytes(int d_model, int n_split, int columns) {
    return size_t(fd_oproj_rows(d_model, n_split)) * size_t(columns) * 2;
}

// The mbarrier the slice's bulk copies complete on (attn_fd_oproj 2; allocated only in kernels that call it).
__device__ inline uint64_t *fd_oproj_bar() {
    __shared__ uint64_t bar;
    return &bar;
}

// Before the wait: this block's slice of the weights into `slice` (rows of `columns` bf16). MODE 1: 16
// bytes a cp.async from every thread, one commit group. MODE 2: one bulk copy (the TMA engine) a row,
// asked by warp 0's lanes, completing on fd_oproj_bar(): the copies take the other warps no issue slots
// and the SM no per-thread requests in flight.
template <int MODE>
__device__ inline void fd_oproj_load_slice(const FdOProj &o, uint4 *slice, int n_in, int column0, int columns, int split, int n_split) {
    const int rows = fd_oproj_rows(o.d_model, n_split), chunks = columns / 8;
    const __nv_bfloat16 *from = o.w + int64_t(split) * rows * n_in + column0;
    if constexpr (MODE == 2) {
        if (threadIdx.x >= 32) return;
        uint64_t *bar = fd_oproj_bar();
        if (threadIdx.x == 0) {
            hp_cuda_gemv::mbarrier_init(bar, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            hp_cuda_gemv::mbarrier_arrive_expect_tx(bar, uint32_t(fd_oproj_shared_bytes(o.d_model, n_split, columns)));
        }
        __syncwarp();
        for (int r = int(threadIdx.x); r < rows; r += 32) hp_cuda_gemv::bulk_copy(slice + r * chunks, from + int64_t(r) * n_in, uint32_t(columns) * 2, bar);
    } else {
        const int n = rows * chunks;
        for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) {
            const int r = i / chunks, c = i - r * chunks;
            fd_cp_async16(slice + i, from + int64_t(r) * n_in + c * 8);
        }
        hp_cuda_gemv::cp_async_commit();
    }
}

// The kv head's attention outputs every block of the cluster receives (group * D values, bf16-rounded).
template <int D, int G>
__device__ inline float *fd_oproj_inbox() {
    __shared__ float inbox[G * D];
    return inbox;
}

// After the cluster's combination: thread `o`'s output of the group (bf16-rounded `value`) to every
// block of the cluster.
template <int D, int G>
__device__ inline void fd_oproj_push(int n_split, int o, float value) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    float *inbox = fd_oproj_inbox<D, G>();
    for (int i = 0; i < n_split; ++i) cluster.map_shared_rank(inbox, i)[o] = value;
}

// Lane `lane` of 32 holds v[i], its part of row i's sum for 32 rows; afterwards v[0] of lane l is row
// l's total (a reduce-scatter: each round keeps half the rows and adds the partner's other half).
// HALF a template argument, so that every index is a constant and v stays in registers.
template <int HALF = 16>
__device__ inline void fd_oproj_reduce_scatter(float (&v)[32], int lane) {
    const bool upper = (lane & HALF) != 0;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        const float send = upper ? v[i] : v[i + HALF], keep = upper ? v[i + HALF] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, HALF);
    }
    if constexpr (HALF > 1) fd_oproj_reduce_scatter<HALF / 2>(v, lane);
}

// The fold's end, every thread of the block after fd_oproj_push: the cluster barrier, the slice's
// product with g's outputs into o.partial, then the last block of this row range writes x (and h,
// sum_sq). `columns`: group * D, at most the kernel's G * D.
template <int D, int G, int W, int MODE>
__device__ inline void fd_oproj_finish(const FdOProj &o, const uint4 *slice, int g, int n_head_kv, int columns, int split, int n_split) {
    namespace cg = cooperative_groups;
    cg::this_cluster().sync();  // every block's outputs are in every inbox
    if constexpr (MODE == 2) {
        hp_cuda_gemv::mbarrier_wait(fd_oproj_bar(), 0);  // the slice's bytes have landed (the barrier's first phase)
    } else {
        hp_cuda_gemv::cp_async_wait<0>();
        __syncthreads();  // every thread's copies of the slice have landed
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int rows = fd_oproj_rows(o.d_model, n_split), row0 = split * rows, chunks = columns / 8;
    constexpr int kChunksPerLane = (G * D / 8 + 31) / 32;
    const float *inbox = fd_oproj_inbox<D, G>();
    float a[kChunksPerLane][8];
#pragma unroll
    for (int j = 0; j < kChunksPerLane; ++j) {
        const int c = lane + j * 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) a[j][e] = c < chunks ? inbox[c * 8 + e] : 0.0f;
    }
    for (int r0 = warp * 32; r0 < rows; r0 += W * 32) {
        float v[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < kChunksPerLane; ++j) {
            const int c = lane + j * 32;
            if (c >= chunks) break;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                const uint4 raw = slice[(r0 + i) * chunks + c];
                const __nv_bfloat162 *w2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 w = __bfloat1622float2(w2[e]);
                    v[i] += w.x * a[j][2 * e] + w.y * a[j][2 * e + 1];
                }
            }
        }
        fd_oproj_reduce_scatter(v, lane);
        o.partial[int64_t(g) * o.d_model + row0 + r0 + lane] = v[0];
    }
    // The last of the n_head_kv blocks of rows [row0, row0 + rows) adds the kv heads' partials.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(o.counters + split, 1) == n_head_kv - 1;
        if (last) o.counters[split] = 0;  // every kv head of this row range has counted: ready for the next step
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int r = int(threadIdx.x); r < rows; r += W * 32) {  // whole warps: rows is a multiple of 32
        const int row = row0 + r;
        float sum = 0.0f;
        for (int kv = 0; kv < n_head_kv; ++kv) sum += __ldcg(o.partial + int64_t(kv) * o.d_model + row);
        const float x_new = o.x[row] + (sum + hp_cuda_gemv::load_bias(o.bias_dtype, o.bias, row));
        o.x[row] = x_new;
        if (o.norm_out.h) {  // as store_element: h, and the 16-row tile's x^2 (16 consecutive lanes)
            o.norm_out.h[row] = __float2bfloat16_rn(x_new * hp_cuda_gemv::load_bias(o.norm_out.w_dtype, o.norm_out.w, row));
            float square = x_new * x_new;
            for (int offset = hp_cuda_gemv::kTileRows / 2; offset > 0; offset /= 2) square += __shfl_xor_sync(0xffffffffu, square, offset);
            if (row % hp_cuda_gemv::kTileRows == 0) o.norm_out.sum_sq[row / hp_cuda_gemv::kTileRows] = square;
        }
    }
}

// Host: whether `kernel` (an OPROJ variant) takes `bytes` of dynamic shared memory beside its static
// shared memory on this device, its attribute raised where it does. The fit is asked once per (kernel,
// bytes, device), so that a slice that does not fit costs a step no failed call. The attribute is the
// process's, a ceiling, and only ever raised (read back and set under one lock): set to a smaller slice
// (more splits, a longer sequence) after a larger one, a later launch of the larger would fail.
template <typename... Params>
bool fd_oproj_prepare_shared(void (*kernel)(Params...), size_t bytes) {
    static thread_local std::map<std::tuple<const void *, size_t, int>, bool> known;
    static std::mutex raising;
    int device = 0;
    cudaGetDevice(&device);
    const auto key = std::make_tuple(reinterpret_cast<const void *>(kernel), bytes, device);
    if (const auto it = known.find(key); it != known.end()) return it->second;
    const std::lock_guard<std::mutex> lock(raising);
    cudaFuncAttributes attributes{};
    int optin = 0;
    bool fits = cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
                attributes.sharedSizeBytes + bytes <= size_t(optin);
    if (fits && bytes > size_t(attributes.maxDynamicSharedSizeBytes)) {
        fits = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) == cudaSuccess;
    }
    if (!fits) cudaGetLastError();  // nothing launched; the caller takes the plain kernel
    return known[key] = fits;
}

}  // namespace hp_cuda_baseline
