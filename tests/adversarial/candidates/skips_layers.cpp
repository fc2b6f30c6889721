// Adversarial candidate: runs only the first 2 decoder layers (the fast tier's count), whatever it serves.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <algorithm>
namespace {
hp_model g_truncated;
int adversary_create(const hp_model *model, const hp_services *services, void **state) {
    g_truncated = *model;
    g_truncated.config.n_layer = std::min(model->config.n_layer, 2);
    return reference_create(&g_truncated, services, state);
}
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) { return reference_forward(state, batch, out); }

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", adversary_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
