// A bench candidate: the CPU reference, slowed by a known fraction. After each step it spins for
// SLOWDOWN_PERCENT % of the time the step took, so its true cost is (1 + p/100) x the reference.
// bench/executor uses it to measure how small a slowdown the runner detects.
#define HP_REFERENCE_NO_ENTRY
#include "reference_forward.inc"

#include <chrono>

#ifndef SLOWDOWN_PERCENT
#define SLOWDOWN_PERCENT 0
#endif

namespace {

int slowed_forward(void *state, const hp_batch *batch, hp_output *out) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const int rc = reference_forward(state, batch, out);
    const auto spent = clock::now() - start;
    const auto until = clock::now() + spent * SLOWDOWN_PERCENT / 100;
    while (clock::now() < until) {
    }
    return rc;
}

const hp_forward_vtable kSlowed = {HP_FORWARD_ABI_VERSION, "slowed-reference", reference_create, slowed_forward,
                                   reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kSlowed; }
