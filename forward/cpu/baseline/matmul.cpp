// Chooses between the decode kernel and the blocked GEMM by batch size (knob HP_GEMM_MIN_TOKENS).
#include "matmul.h"

#include "knobs.h"

namespace hp_cpu {

int64_t matmul_w_pack_floats() { return int64_t(HP_GEMM_NC) * HP_GEMM_KC; }
int64_t matmul_x_pack_floats() { return int64_t(HP_GEMM_MC) * HP_GEMM_KC; }
int64_t matmul_split_tokens() { return HP_GEMV_SPLIT && HP_GEMV_STREAM ? 1 : 0; }

int64_t matmul_row_align(int64_t n_token) { return n_token >= HP_GEMM_MIN_TOKENS ? HP_GEMM_NR : 16; }

void matmul_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
                 const MatmulOutput &out, MatmulScratch &scratch) {
    if (row_begin >= row_end || in.n_token == 0) return;
    if (in.n_token >= HP_GEMM_MIN_TOKENS) gemm_rows(w, b, in, row_begin, row_end, out, scratch);
    else gemv_rows(w, b, in, row_begin, row_end, out, scratch);
}

}  // namespace hp_cpu
