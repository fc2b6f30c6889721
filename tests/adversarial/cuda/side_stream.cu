// CUDA adversary: correct outputs, but part of its work (a ~4 ms kernel) runs on a stream of its
// own that nobody waits for, outside the events on the engine's stream. Verdict: escaped_stream
// (the host clock to a whole-device synchronize disagrees with the events).
#include "adversary.cuh"

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    const int code = adversary::honest(state, batch, out);
    adversary::spin_kernel<<<1, 1, 0, state->side>>>(8000000);  // ~4 ms at ~2 GHz
    return code;
}

HP_ADVERSARY("side-stream")
