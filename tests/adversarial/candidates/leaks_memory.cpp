// Adversarial candidate: allocates and touches 4 MB on every call and never frees it.
// Wraps the CPU reference, which the test copies beside this file as reference_forward.inc.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"
#include <cstdlib>
#include <cstring>
#include <vector>
namespace {
std::vector<void *> g_leaked;  // escapes, so the compiler cannot drop the allocation
int adversary_forward(void *state, const hp_batch *batch, hp_output *out) {
    void *leak = std::malloc(4 << 20);
    std::memset(leak, 1, 4 << 20);
    g_leaked.push_back(leak);
    return reference_forward(state, batch, out);
}

const hp_forward_vtable kAdversary = {HP_FORWARD_ABI_VERSION, "adversary", reference_create, adversary_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kAdversary; }
