// The device checksum of the CUDA backend: a position-sensitive sum of mixed 64-bit words, so the
// weights are hashed where they live (an H200 reads 2.5 GB in under a millisecond). The sum is
// order-independent, so the atomics make it deterministic. Plain CUDA C++ (no fmt).
#include <cuda_runtime.h>

#include <cstdint>

#include "synthetic_fill.h"

namespace hp::backend {
namespace {

__device__ inline uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__global__ void checksum_kernel(const uint4 *data, uint64_t n16, const uint8_t *tail, int n_tail, unsigned long long *out) {
    uint64_t sum = 0;
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = data[i];
        const uint64_t lo = uint64_t(v.y) << 32 | v.x, hi = uint64_t(v.w) << 32 | v.z;
        sum += mix64(lo ^ (2 * i + 1) * 0x9e3779b97f4a7c15ull) + mix64(hi ^ (2 * i + 2) * 0x9e3779b97f4a7c15ull);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (int i = 0; i < n_tail; ++i) sum += mix64(uint64_t(tail[i]) ^ (n16 * 2 + 3 + uint64_t(i)) * 0xc2b2ae3d27d4eb4full);
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, static_cast<unsigned long long>(sum));
}

}  // namespace

cudaError_t launch_checksum(const void *data, uint64_t bytes, unsigned long long *out, int n_sm, cudaStream_t stream) {
    const uint64_t n16 = bytes / 16;
    const int threads = 256;
    const uint64_t wanted = (n16 + threads - 1) / threads;
    const int blocks = int(wanted < uint64_t(n_sm) * 8 ? (wanted > 0 ? wanted : 1) : uint64_t(n_sm) * 8);
    cudaError_t status = cudaMemsetAsync(out, 0, sizeof(unsigned long long), stream);
    if (status != cudaSuccess) return status;
    checksum_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4 *>(data), n16,
                                                    static_cast<const uint8_t *>(data) + n16 * 16, int(bytes % 16), out);
    return cudaGetLastError();
}

}  // namespace hp::backend
