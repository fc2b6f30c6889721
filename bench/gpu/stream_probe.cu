// How fast can one launch stream weights from HBM into an SM, by each path the decode GEMVs could
// use? Reads a 1 GiB buffer once per launch (each block a contiguous share, as the staged GEMV's
// blocks own contiguous rows), sums it so nothing is optimised away, and reports GB/s (median of 20
// launches timed with events) for:
//   ldg     16-byte loads into registers (ld.global.nc.L1::no_allocate), 8 in flight per lane,
//           BLOCKS blocks of 256 threads per SM (the clustered GEMV's kind of load);
//   cpasync cp.async 16 bytes per thread into a ring of STAGES shared-memory stages of 16 KB, one
//           commit group per stage, wait_group + __syncthreads per stage (gemv_staged.cuh's loop);
//   bulk    cp.async.bulk of one 16 KB stage per copy into the same ring, an mbarrier per stage.
// The copy bandwidth (cudaMemcpy device to device, bytes read + written) is measured in the same run.
// usage: hotpass_bench_gpu_stream_probe        (prints one line per variant)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kThreads = 256;
constexpr int kStageBytes = 16384;

__device__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
__device__ size_t smaller(size_t a, size_t b) { return a < b ? a : b; }

__global__ void __launch_bounds__(kThreads) ldg_kernel(const uint4 *data, size_t n, uint32_t *sink) {
    const size_t per_block = (n + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * per_block, end = smaller(n, begin + per_block);
    uint32_t acc = 0;
    for (size_t i = begin + threadIdx.x; i < end; i += 8 * kThreads) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const size_t at = i + size_t(u) * kThreads;
            if (at < end) {
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                             : "l"(data + at));
            } else {
                v[u] = make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= fold(v[u]);
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int STAGES>
__global__ void __launch_bounds__(kThreads, 1) cpasync_kernel(const uint4 *data, size_t n, uint32_t *sink) {
    extern __shared__ __align__(128) uint4 ring[];
    constexpr int kPer = kStageBytes / 16;
    const size_t per_block = (n + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * per_block, end = smaller(n, begin + per_block);
    const size_t n_item = (end - begin + kPer - 1) / kPer;
    size_t produced = 0;
    auto produce = [&](int stage) {
        if (produced < n_item) {
            for (int i = threadIdx.x; i < kPer; i += kThreads) {
                const size_t at = begin + produced * kPer + i;
                if (at < end) {
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(ring + stage * kPer + i))),
                                 "l"(data + at)
                                 : "memory");
                }
            }
            ++produced;
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int s = 0; s < STAGES; ++s) produce(s);
    uint32_t acc = 0;
    for (size_t item = 0; item < n_item; ++item) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
        __syncthreads();
        if (item > 0) produce(int((item - 1) % STAGES));
        const uint4 *stage = ring + (item % STAGES) * kPer;
        for (int i = threadIdx.x; i < kPer; i += kThreads) acc ^= fold(stage[i]);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    if (acc == 0x12345678u) sink[0] = acc;
}

__device__ uint32_t shared_address(const void *ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }

template <int STAGES>
__global__ void __launch_bounds__(kThreads, 1) bulk_kernel(const uint4 *data, size_t n, uint32_t *sink) {
    extern __shared__ __align__(128) uint4 ring[];
    __shared__ __align__(8) uint64_t full[STAGES];
    constexpr int kPer = kStageBytes / 16;
    const size_t per_block = (n + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * per_block, end = smaller(n, begin + per_block);
    const size_t n_item = (end - begin + kPer - 1) / kPer;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&full[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    size_t produced = 0;
    auto produce = [&](int stage) {
        if (threadIdx.x != 0 || produced >= n_item) return;
        const size_t at = begin + produced * kPer;
        const uint32_t bytes = uint32_t(smaller(kPer, end - at) * 16);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(&full[stage])), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(ring + stage * kPer)),
                     "l"(data + at), "r"(bytes), "r"(shared_address(&full[stage]))
                     : "memory");
        ++produced;
    };
    for (int s = 0; s < STAGES; ++s) produce(s);
    uint32_t acc = 0;
    for (size_t item = 0; item < n_item; ++item) {
        const int stage = int(item % STAGES);
        const uint32_t parity = uint32_t(item / STAGES) & 1u;
        asm volatile(
            "{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT;\n}\n" ::"r"(shared_address(&full[stage])),
            "r"(parity)
            : "memory");
        const uint4 *ring_stage = ring + stage * kPer;
        const size_t valid = smaller(kPer, end - (begin + item * kPer));
        for (int i = threadIdx.x; i < int(valid); i += kThreads) acc ^= fold(ring_stage[i]);
        __syncthreads();
        if (threadIdx.x == 0 && item + STAGES < n_item) {  // refill the stage just consumed
            const size_t next = item + STAGES, at = begin + next * kPer;
            const uint32_t bytes = uint32_t(smaller(kPer, end - at) * 16);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(&full[stage])), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(ring + stage * kPer)),
                         "l"(data + at), "r"(bytes), "r"(shared_address(&full[stage]))
                         : "memory");
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <typename Launch>
double median_gbs(size_t bytes, Launch launch) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    launch();  // warm-up
    std::vector<float> ms;
    for (int r = 0; r < 20; ++r) {
        cudaEventRecord(start);
        launch();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return double(bytes) / (double(ms[ms.size() / 2]) * 1e-3) / 1e9;
}

}  // namespace

int main() {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    const size_t bytes = size_t(1) << 30, n = bytes / 16;
    uint4 *data = nullptr, *copy = nullptr;
    uint32_t *sink = nullptr;
    if (cudaMalloc(&data, bytes) != cudaSuccess || cudaMalloc(&copy, bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) {
        std::fprintf(stderr, "cudaMalloc failed\n");
        return 1;
    }
    cudaMemset(data, 1, bytes);
    std::printf("copy (read + write)     %7.0f GB/s\n", 2 * median_gbs(bytes, [&] { cudaMemcpy(copy, data, bytes, cudaMemcpyDeviceToDevice); }));
    for (int blocks : {1, 2, 4, 8}) {
        const double gbs = median_gbs(bytes, [&] { ldg_kernel<<<sms * blocks, kThreads>>>(data, n, sink); });
        std::printf("ldg     %d blocks/SM     %7.0f GB/s\n", blocks, gbs);
    }
    auto ring = [&](auto kernel, int stages, const char *name) {
        const size_t shared = size_t(stages) * kStageBytes;
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
        const double gbs = median_gbs(bytes, [&] { kernel<<<sms, kThreads, shared>>>(data, n, sink); });
        std::printf("%-7s %d x 16 KB stages %7.0f GB/s%s\n", name, stages, gbs, cudaGetLastError() == cudaSuccess ? "" : " (launch error)");
    };
    ring(cpasync_kernel<4>, 4, "cpasync");
    ring(cpasync_kernel<6>, 6, "cpasync");
    ring(cpasync_kernel<12>, 12, "cpasync");
    ring(bulk_kernel<4>, 4, "bulk");
    ring(bulk_kernel<6>, 6, "bulk");
    ring(bulk_kernel<12>, 12, "bulk");
    cudaFree(data);
    cudaFree(copy);
    cudaFree(sink);
    return 0;
}
