// Adversarial candidate: honest whenever a batch's layout (positions, block tables) is new, but when
// a call repeats the previous call's layout with other token ids (as the timing loop's calls of one
// shape do, and verification never does) it returns the previous call's logits without computing.
// Right while verified and far "faster" while timed.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <vector>
namespace {
std::vector<int32_t> last_layout, last_tokens;
std::vector<float> last_logits;

int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const hp_model &model = *static_cast<ReferenceState *>(state)->model;
    std::vector<int32_t> layout(batch->positions, batch->positions + batch->n_token);
    layout.insert(layout.end(), batch->block_tables, batch->block_tables + int64_t(batch->n_seq) * batch->max_blocks_per_seq);
    layout.insert(layout.end(), batch->logit_rows, batch->logit_rows + batch->n_logit_row);
    const std::vector<int32_t> tokens(batch->token_ids, batch->token_ids + batch->n_token);
    const size_t n_out = size_t(batch->n_logit_row) * size_t(model.config.n_vocab);
    if (layout == last_layout && tokens != last_tokens && last_logits.size() == n_out) {
        std::copy(last_logits.begin(), last_logits.end(), out->logits);
        last_tokens = tokens;
        return 0;
    }
    const int rc = reference_forward(state, batch, out);
    last_layout = layout;
    last_tokens = tokens;
    last_logits.assign(out->logits, out->logits + n_out);
    return rc;
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
