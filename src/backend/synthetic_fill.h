// Launchers of the backend's kernels (synthetic_fill.cu, checksum.cu), for the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hp::backend {

// out[i] = round_dtype(mean + std * normal_at(key, i)) for i < n; dtype is hp::DType's value.
// A position-sensitive checksum of `bytes` at `data` (16-byte aligned) into *out (device memory).
cudaError_t launch_checksum(const void *data, uint64_t bytes, unsigned long long *out, int n_sm, cudaStream_t stream);

cudaError_t launch_fill_normal(void *out, int dtype, uint64_t n, uint64_t key, float mean, float std, int n_sm, cudaStream_t stream);

}  // namespace hp::backend
