// Adversarial candidate: right wherever a sampled reference check can look, wrong where only the
// comparison with the incumbent can. It shifts the last logit row of any prefill chunk longer than
// 40 tokens; with the reference limited to 40 step tokens per batch, that chunk is cut short for
// the reference and its last row is not one the reference computes.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
namespace {
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const int status = reference_forward(state, batch, out);
    if (status != HP_OK) return status;
    const int n_vocab = static_cast<ReferenceState *>(state)->model->config.n_vocab;
    for (int s = 0; s < batch->n_seq; ++s) {
        const int last = batch->seq_token_start[s + 1] - 1;
        if (last - batch->seq_token_start[s] + 1 <= 40) continue;
        for (int row = 0; row < batch->n_logit_row; ++row) {
            if (batch->logit_rows[row] != last) continue;
            for (int v = 0; v < n_vocab; ++v) out->logits[size_t(row) * size_t(n_vocab) + size_t(v)] += 1.0f;
        }
    }
    return HP_OK;
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
