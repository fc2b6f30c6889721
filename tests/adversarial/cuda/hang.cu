// CUDA adversary: a kernel that spins for about 60 s (bounded, so the GPU is never wedged for
// good). Verdict: hang (the RPC deadline passes; the executor is killed, which ends its context).
#include "adversary.cuh"

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    adversary::spin_kernel<<<1, 1, 0, state->stream>>>(120000000000LL);  // ~60 s at ~2 GHz
    cudaStreamSynchronize(state->stream);
    return adversary::honest(state, batch, out);
}

HP_ADVERSARY("hang")
