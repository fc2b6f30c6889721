// Linear layers over a batch of tokens, one thread's share of output rows at a time:
//   y[t][row] = (accumulate ? y[t][row] : 0) + W[row] . x[t] + b[row]
// W is a read-only weight [n_out][n_in] in its stored dtype (bf16/f16/f32), never copied whole.
// Fewer than HP_GEMM_MIN_TOKENS tokens use the decode kernel (gemv.cpp: each weight row streamed
// once for all tokens); more use the blocked GEMM (gemm.cpp: f32 panels packed per thread).
#pragma once

#include <hotpass/forward_abi.h>

#include <cstdint>

namespace hp_cpu {

// Per-thread buffers: the blocked GEMM's packed panels (sizes from matmul_*_floats()) and the
// decode kernel's activations with even and odd elements split (gemv.cpp; NULL: not used).
struct MatmulScratch {
    float *w_pack = nullptr;   // [HP_GEMM_NC][HP_GEMM_KC]
    float *x_pack = nullptr;   // [HP_GEMM_MC][HP_GEMM_KC]
    float *x_split = nullptr;  // [x_split_floats]: matmul_split_tokens() rows of the widest matmul input
    int64_t x_split_floats = 0;
};
int64_t matmul_w_pack_floats();
int64_t matmul_x_pack_floats();
int64_t matmul_split_tokens();

// The activations of one matmul: token t's input row is x + row(t) * x_stride, where row(t) is
// x_rows[t] when x_rows is given (tokens gathered by MoE routing), else t.
struct MatmulInput {
    const float *x = nullptr;
    int64_t x_stride = 0;
    const int32_t *x_rows = nullptr;
    int64_t n_token = 0;
    const float *row(int64_t t) const { return x + (x_rows ? int64_t(x_rows[t]) : t) * x_stride; }
};

struct MatmulOutput {
    float *y = nullptr;
    int64_t y_stride = 0;
    bool accumulate = false;
};

// Output rows [row_begin, row_end) of y = x W^T (+ b). `b` may be absent (data == NULL).
void matmul_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
                 const MatmulOutput &out, MatmulScratch &scratch);

// Row granularity at which threads should split a matmul over n_token tokens.
int64_t matmul_row_align(int64_t n_token);

// The two strategies, exposed for the benchmark and the tests.
void gemv_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
               const MatmulOutput &out, MatmulScratch &scratch);
void gemm_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
               const MatmulOutput &out, MatmulScratch &scratch);

}  // namespace hp_cpu
