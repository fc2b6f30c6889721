// CUDA adversary: computes the first step of each logits size honestly and keeps a copy; later
// steps with the same number of logit rows get the stale copy. Verdict: wrong_output (or
// greedy_divergence, when only the greedy decode repeats a size).
#include "adversary.cuh"

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    static int last_rows = -1;
    const size_t n = size_t(batch->n_logit_row) * size_t(state->model->config.n_vocab);
    if (batch->n_logit_row == last_rows && n <= state->cache_floats) {
        cudaMemcpyAsync(out->logits, state->cache, n * sizeof(float), cudaMemcpyDeviceToDevice, state->stream);
        return HP_OK;
    }
    const int code = adversary::honest(state, batch, out);
    if (n <= state->cache_floats) {
        cudaMemcpyAsync(state->cache, out->logits, n * sizeof(float), cudaMemcpyDeviceToDevice, state->stream);
        last_rows = batch->n_logit_row;
    }
    return code;
}

HP_ADVERSARY("stale-output")
