// Adversarial candidate: leaves a thread running past destroy() and also gets one logit wrong, so
// that it fails verification first: the executor must still be replaced before the next candidate
// (the thread's code is unmapped when the plugin is unloaded).
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <thread>
#include <unistd.h>
namespace {
int adversary_create(const hp_model *model, const hp_services *services, void **state) {
    std::thread([] {
        for (;;) usleep(1000);
    }).detach();
    return reference_create(model, services, state);
}
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const int rc = reference_forward(state, batch, out);
    out->logits[0] += 100.0f;
    return rc;
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", adversary_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
