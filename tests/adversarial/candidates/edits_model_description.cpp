// Adversarial candidate: rewrites the model description it is handed (`const` is only a promise):
// the served layer count drops to one, so the reference, checked against the same description,
// would compute one layer too, and every later candidate in the executor with it.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
namespace {
int adversary_create(const hp_model *model, const hp_services *services, void **state) {
    const_cast<hp_model *>(model)->config.n_layer = 1;
    return reference_create(model, services, state);
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", adversary_create, reference_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
