// Adversarial candidate: starts a thread in create() that outlives destroy().
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <thread>
#include <unistd.h>
namespace {
int adversary_create(const hp_model *model, const hp_services *services, void **state) {
    std::thread([] {
        for (;;) sleep(1);
    }).detach();
    return reference_create(model, services, state);
}
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) { return reference_forward(state, batch, out); }

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", adversary_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
