// The decode kernel: a skinny GEMM for a few tokens. A register tile of HP_GEMV_ROWS weight rows
// (HP_GEMV_ROWS_WIDE from 2 x HP_GEMV_TOKENS tokens on) x HP_GEMV_TOKENS tokens walks k once; weights are widened in registers and every weight row is read
// from memory once per call (further token tiles find it in cache), so decode is bound by the
// weight stream. Invariant: each y element is written exactly once per call.
#include <utility>

#include "matmul.h"
#include "simd.h"

namespace hp_cpu {
namespace {

template <int D, int R, int T>
void gemv_tile(const storage_t<D> *w, int64_t n_in, const float *const *x, float *sums /* [T][R] */) {
    // Two accumulator sets over alternating k steps when registers allow, so that a single row
    // and token (batch-1 decode) is not bound by the FMA latency chain.
    constexpr int kSets = R * T <= 8 ? 2 : 1;
    vf acc[kSets][R][T];
    for (int s = 0; s < kSets; ++s)
        for (int r = 0; r < R; ++r)
            for (int t = 0; t < T; ++t) acc[s][r][t] = vzero();
    int64_t k = 0;
    for (; k + kSets * kWidth <= n_in; k += kSets * kWidth) {
        if constexpr (HP_PREFETCH_BYTES > 0) {
            for (int r = 0; r < R; ++r) prefetch(reinterpret_cast<const char *>(w + r * n_in + k) + HP_PREFETCH_BYTES);
        }
        for (int s = 0; s < kSets; ++s) {
            vf wv[R];
            for (int r = 0; r < R; ++r) wv[r] = load_w<D>(w + r * n_in + k + s * kWidth);
            for (int t = 0; t < T; ++t) {
                const vf xv = vload(x[t] + k + s * kWidth);
                for (int r = 0; r < R; ++r) acc[s][r][t] = vfmadd(wv[r], xv, acc[s][r][t]);
            }
        }
    }
    for (; k + kWidth <= n_in; k += kWidth) {
        for (int r = 0; r < R; ++r) {
            const vf wv = load_w<D>(w + r * n_in + k);
            for (int t = 0; t < T; ++t) acc[0][r][t] = vfmadd(wv, vload(x[t] + k), acc[0][r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) {
            vf total = acc[0][r][t];
            for (int s = 1; s < kSets; ++s) total = vadd(total, acc[s][r][t]);
            float sum = vsum(total);
            for (int64_t kk = k; kk < n_in; ++kk) sum += load1<D>(w + r * n_in + kk) * x[t][kk];
            sums[t * R + r] = sum;
        }
    }
}

template <int D, int R>
using TileFn = void (*)(const storage_t<D> *, int64_t, const float *const *, float *);

template <int D, int R, int... T>
constexpr TileFn<D, R> tile_for(int n, std::integer_sequence<int, T...>) {
    TileFn<D, R> table[] = {gemv_tile<D, R, T + 1>...};
    return table[n - 1];
}

template <int D, int R>
void gemv_block(const storage_t<D> *w, int64_t n_in, const MatmulInput &in, int64_t row, const hp_tensor &b,
                const MatmulOutput &out) {
    const float *x[HP_GEMV_TOKENS];
    float sums[HP_GEMV_TOKENS * R];
    for (int64_t t0 = 0; t0 < in.n_token; t0 += HP_GEMV_TOKENS) {
        const int n = int(in.n_token - t0 < HP_GEMV_TOKENS ? in.n_token - t0 : HP_GEMV_TOKENS);
        for (int t = 0; t < n; ++t) x[t] = in.row(t0 + t);
        tile_for<D, R>(n, std::make_integer_sequence<int, HP_GEMV_TOKENS>{})(w + row * n_in, n_in, x, sums);
        for (int t = 0; t < n; ++t) {
            float *y = out.y + (t0 + t) * out.y_stride + row;
            for (int r = 0; r < R; ++r) {
                float value = sums[t * R + r];
                if (b.data) value += load_any(b.dtype, b.data, row + r);
                y[r] = out.accumulate ? y[r] + value : value;
            }
        }
    }
}

template <int D>
void gemv_typed(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
                const MatmulOutput &out) {
    const auto *weights = static_cast<const storage_t<D> *>(w.data);
    const int64_t n_in = w.shape[1];
    int64_t row = row_begin;
    // Few tokens: the weight stream is the limit and one row at a time streams best. Many: the
    // FMAs are, and a taller tile reuses each activation load across rows.
    if (in.n_token >= 2 * HP_GEMV_TOKENS) {
        for (; row + HP_GEMV_ROWS_WIDE <= row_end; row += HP_GEMV_ROWS_WIDE) gemv_block<D, HP_GEMV_ROWS_WIDE>(weights, n_in, in, row, b, out);
    }
    for (; row + HP_GEMV_ROWS <= row_end; row += HP_GEMV_ROWS) gemv_block<D, HP_GEMV_ROWS>(weights, n_in, in, row, b, out);
    for (; row < row_end; ++row) gemv_block<D, 1>(weights, n_in, in, row, b, out);
}

}  // namespace

void gemv_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
               const MatmulOutput &out) {
    switch (w.dtype) {
        case HP_DTYPE_F32: gemv_typed<HP_DTYPE_F32>(w, b, in, row_begin, row_end, out); break;
        case HP_DTYPE_F16: gemv_typed<HP_DTYPE_F16>(w, b, in, row_begin, row_end, out); break;
        case HP_DTYPE_BF16: gemv_typed<HP_DTYPE_BF16>(w, b, in, row_begin, row_end, out); break;
    }
}

}  // namespace hp_cpu
