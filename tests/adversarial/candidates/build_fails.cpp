// Adversarial candidate: does not compile.
#include <hotpass/forward_abi.h>

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return this_is_not_defined; }
