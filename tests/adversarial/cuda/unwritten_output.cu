// CUDA adversary: returns success without computing anything. Verdict: unwritten_output (the
// logits still hold the executor's poison).
#include "adversary.cuh"

int adversary_forward(void *, const hp_batch *, hp_output *) { return HP_OK; }

HP_ADVERSARY("unwritten-output")
