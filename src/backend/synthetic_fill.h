// Launcher of the synthetic-weight kernel (synthetic_fill.cu), for the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hp::backend {

// out[i] = round_dtype(mean + std * normal_at(key, i)) for i < n; dtype is hp::DType's value.
cudaError_t launch_fill_normal(void *out, int dtype, uint64_t n, uint64_t key, float mean, float std, int n_sm, cudaStream_t stream);

}  // namespace hp::backend
