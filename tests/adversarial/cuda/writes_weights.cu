// CUDA adversary: flips the bits of the first embedding element in device memory, then computes
// honestly. Verdict: wrote_weights (the executor's device checksum of the weights changed).
#include "adversary.cuh"

__global__ void flip(uint16_t *weight) { weight[0] ^= 0xffffu; }

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    if (state->calls++ == 0) flip<<<1, 1, 0, state->stream>>>(static_cast<uint16_t *>(const_cast<void *>(state->model->token_embd.data)));
    return adversary::honest(state, batch, out);
}

HP_ADVERSARY("writes-weights")
