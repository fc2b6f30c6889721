// Adversarial candidate: an honest pass whose name() is not valid UTF-8 (it reaches the executor's
// JSON replies): it must be judged like any honest candidate, not crash the executor or hotpass.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
namespace {
const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "pass\xe9\xff", reference_create, reference_forward, reference_destroy};
}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
