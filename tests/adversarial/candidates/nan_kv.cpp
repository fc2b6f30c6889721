// Adversarial candidate: computes correct logits, then turns one V entry it wrote (the last layer,
// the batch's last token) into NaN, so the next step would read it.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <cmath>
namespace {
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const int rc = reference_forward(state, batch, out);
    const hp_model &model = *static_cast<ReferenceState *>(state)->model;
    const int token = batch->n_token - 1, seq = batch->n_seq - 1;
    const int32_t *block_table = batch->block_tables + int64_t(seq) * batch->max_blocks_per_seq;
    const int layer = model.config.n_layer - 1;
    store(model.kv->dtype, model.kv->v[layer], kv_offset(model, block_table, batch->positions[token]), std::nanf(""));
    return rc;
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
