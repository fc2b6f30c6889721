// Adversarial candidate: writes into the first weight (weights are read-only mappings).
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
namespace {
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const hp_model *model = static_cast<ReferenceState *>(state)->model;
    *const_cast<uint16_t *>(static_cast<const uint16_t *>(model->token_embd.data)) = 0;
    return reference_forward(state, batch, out);
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
