// Adversarial candidate: skips all work when one sequence decodes at position 128 (a workload shape).
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <cstring>
namespace {
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    if (batch->n_seq == 1 && batch->n_token == 1 && batch->positions[0] == 128) {
        const hp_model *model = static_cast<ReferenceState *>(state)->model;
        std::memset(out->logits, 0, sizeof(float) * size_t(model->config.n_vocab));
        return HP_OK;
    }
    return reference_forward(state, batch, out);
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
