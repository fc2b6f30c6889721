// CUDA adversary: honest on the workload's token counts (1, 8 and 64 tokens per step), 25% off
// elsewhere. Verdict: wrong_output (the verifier also draws shapes the workload does not have).
#include "adversary.cuh"

int adversary_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    auto *state = static_cast<adversary::State *>(state_ptr);
    const int code = adversary::honest(state, batch, out);
    if (batch->n_token == 1 || batch->n_token == 8 || batch->n_token == 64) return code;
    const size_t n = size_t(batch->n_logit_row) * size_t(state->model->config.n_vocab);
    adversary::scale_kernel<<<unsigned((n + 255) / 256), 256, 0, state->stream>>>(out->logits, n, 1.25f);
    return code;
}

HP_ADVERSARY("special-cases-shapes")
