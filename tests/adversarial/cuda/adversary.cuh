// Shared by the CUDA adversaries: wraps the CUDA reference forward pass (which the test copies
// beside each adversary as reference_forward.inc, with its kernels.cuh) under a hidden name, so an
// adversary can run the honest computation and then cheat around it. Each adversary defines
// adversary_forward() and ends with HP_ADVERSARY("name").
#pragma once

#include <cuda_runtime.h>

#include <hotpass/forward_abi.h>

#undef HP_EXPORT
#define HP_EXPORT
#define hp_forward_entry reference_entry
#include "reference_forward.inc"
#undef hp_forward_entry
#undef HP_EXPORT
#define HP_EXPORT __attribute__((visibility("default")))

namespace adversary {

struct State {
    void *inner = nullptr;
    const hp_model *model = nullptr;
    cudaStream_t stream = nullptr;  // the engine's stream
    cudaStream_t side = nullptr;    // a stream of the adversary's own
    float *cache = nullptr;         // device memory of the adversary's own
    size_t cache_floats = 0;
    int calls = 0;
};

inline const hp_forward_vtable &inner() { return *reference_entry(); }

inline int create(const hp_model *model, const hp_services *services, void **out) {
    auto *state = new State;
    state->model = model;
    state->stream = static_cast<cudaStream_t>(services->stream);
    cudaStreamCreateWithFlags(&state->side, cudaStreamNonBlocking);
    state->cache_floats = size_t(64) * size_t(model->config.n_vocab);
    cudaMalloc(&state->cache, state->cache_floats * sizeof(float));
    const int code = inner().create(model, services, &state->inner);
    if (code != HP_OK) {
        delete state;
        return code;
    }
    *out = state;
    return HP_OK;
}

inline void destroy(void *state_ptr) {
    auto *state = static_cast<State *>(state_ptr);
    inner().destroy(state->inner);
    cudaStreamSynchronize(state->side);
    cudaStreamDestroy(state->side);
    cudaFree(state->cache);
    delete state;
}

inline int honest(State *state, const hp_batch *batch, hp_output *out) { return inner().forward(state->inner, batch, out); }

// Spins one thread for about `cycles` SM clock cycles (bounded, so a test cannot wedge the GPU).
__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

__global__ void scale_kernel(float *x, size_t n, float factor) {
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

}  // namespace adversary

int adversary_forward(void *state, const hp_batch *batch, hp_output *out);

#define HP_ADVERSARY(NAME)                                                                                           \
    static const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, NAME, adversary::create, adversary_forward, \
                                                 adversary::destroy};                                               \
    extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
