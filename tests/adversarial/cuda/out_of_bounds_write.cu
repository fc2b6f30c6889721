// CUDA adversary: after the honest step, a kernel writes 256 GB past the logits, beyond any
// allocation: an illegal address that poisons the context. Verdict: device_fault.
#include "adversary.cuh"

__global__ void wild_write(float *logits) { logits[size_t(1) << 36] = 1.0f; }

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    const int code = adversary::honest(state, batch, out);
    wild_write<<<1, 1, 0, state->stream>>>(out->logits);
    return code;
}

HP_ADVERSARY("out-of-bounds-write")
