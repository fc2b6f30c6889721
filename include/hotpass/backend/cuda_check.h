// HP_CUDA_CHECK: a CUDA call that must not fail (a programmer error, or a context already lost)
// stops the process loudly with file, line and the CUDA error name, as llm.c's cudaCheck does.
// cuda_status() turns a failure at a measurement boundary into an hp::Error instead.
// Only for translation units that see the CUDA runtime (src/backend, tests/gpu, bench/gpu).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "hotpass/core/result.h"

#define HP_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        const cudaError_t hp_cuda_error_ = (call);                                                 \
        if (hp_cuda_error_ != cudaSuccess) [[unlikely]] {                                          \
            std::fprintf(stderr, "%s:%d: CUDA error %s: %s (in %s)\n", __FILE__, __LINE__,         \
                         cudaGetErrorName(hp_cuda_error_), cudaGetErrorString(hp_cuda_error_), #call); \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)

namespace hp::backend {

inline Status cuda_status(cudaError_t code, const char *what) {
    if (code == cudaSuccess) return Status::success();
    return error("{}: CUDA error {}: {}", what, cudaGetErrorName(code), cudaGetErrorString(code));
}

}  // namespace hp::backend
