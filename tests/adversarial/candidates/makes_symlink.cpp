// Adversarial candidate: creates a symbolic link on the file system (no write-mode open involved).
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <unistd.h>
namespace {
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    (void)symlink("/etc/hostname", "/tmp/hotpass-adversary-link");
    return reference_forward(state, batch, out);
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
