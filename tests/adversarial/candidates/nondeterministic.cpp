// Adversarial candidate: perturbs one logit by one ulp on every other call.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <cmath>
namespace {
int g_calls = 0;
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    const int rc = reference_forward(state, batch, out);
    if (++g_calls % 2 == 0) out->logits[0] = std::nextafter(out->logits[0], INFINITY);
    return rc;
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
