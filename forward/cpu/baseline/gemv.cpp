// The decode kernel: a skinny GEMM for a few tokens. A register tile of HP_GEMV_ROWS weight rows
// (HP_GEMV_ROWS_WIDE from 2 x HP_GEMV_TOKENS tokens on) x HP_GEMV_TOKENS tokens walks k once;
// weights are widened in registers and every weight row is read from memory once per call
// (further token tiles find it in cache), so decode is bound by the weight stream. One token
// (batch-1 decode) streams the rows one after another with HP_GEMV_ACCS accumulators.
// bf16 weights at batch 1 with HP_GEMV_SPLIT (AVX-512): a 64-byte load holds 32 bf16; its even
// elements become float32 by a shift and its odd ones by a mask (no cross-lane widening), and they
// meet activations that were split into [even | odd] halves per 32 once per call.
// The products are the same float32 products as the plain path; only the summation order differs.
// Invariant: each y element is written exactly once per call.
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
        if constexpr (HP_TILE_PREFETCH_BYTES > 0) {
            for (int r = 0; r < R; ++r) prefetch(reinterpret_cast<const char *>(w + r * n_in + k) + HP_TILE_PREFETCH_BYTES);
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

// Batch-1 decode: the rows [row_begin, row_end) are one sequential stream of weights. Each row is
// reduced by HP_GEMV_ACCS independent accumulators (so neither the FMA latency nor the loop
// overhead limits the stream), and for rows of at least HP_PREFETCH_MIN_ROW_BYTES software
// prefetches run HP_PREFETCH_BYTES ahead in the stream,
// across row ends, so the next row's first lines are already in flight when a row finishes.
template <int D, bool kPrefetch>
void gemv_stream(const storage_t<D> *w, int64_t n_in, const float *x, int64_t row_begin, int64_t row_end, const hp_tensor &b,
                 const MatmulOutput &out) {
    constexpr int kAcc = HP_GEMV_ACCS, kStep = kAcc * kWidth;
    [[maybe_unused]] constexpr int64_t kLine = 64 / int64_t(sizeof(storage_t<D>));  // elements per cache line
    for (int64_t row = row_begin; row < row_end; ++row) {
        const storage_t<D> *w_row = w + row * n_in;
        vf acc[kAcc];
        for (int a = 0; a < kAcc; ++a) acc[a] = vzero();
        int64_t k = 0;
        for (; k + kStep <= n_in; k += kStep) {
            if constexpr (kPrefetch && HP_PREFETCH_BYTES > 0) {
                for (int64_t line = 0; line < kStep; line += kLine)
                    prefetch(reinterpret_cast<const char *>(w_row + k + line) + HP_PREFETCH_BYTES);
            }
            for (int a = 0; a < kAcc; ++a) acc[a] = vfmadd(load_w<D>(w_row + k + a * kWidth), vload(x + k + a * kWidth), acc[a]);
        }
        for (; k + kWidth <= n_in; k += kWidth) acc[0] = vfmadd(load_w<D>(w_row + k), vload(x + k), acc[0]);
        for (int width = kAcc / 2; width >= 1; width /= 2)
            for (int a = 0; a < width; ++a) acc[a] = vadd(acc[a], acc[a + width]);
        float sum = vsum(acc[0]);
        for (; k < n_in; ++k) sum += load1<D>(w_row + k) * x[k];
        if (b.data) sum += load_any(b.dtype, b.data, row);
        float *y = out.y + row;
        *y = out.accumulate ? *y + sum : sum;
    }
}

#if defined(HP_ISA_AVX512)
constexpr bool kSplit = HP_GEMV_SPLIT != 0;
#else
constexpr bool kSplit = false;
#endif

#if defined(HP_ISA_AVX512)
// out[b + j] = x[b + 2j], out[b + 16 + j] = x[b + 2j + 1] for every whole block of 32 (b = 0, 32, ...).
void split_activations(const float *x, int64_t n_in, float *out) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t b = 0; b + 32 <= n_in; b += 32) {
        const __m512 lo = _mm512_loadu_ps(x + b), hi = _mm512_loadu_ps(x + b + 16);
        _mm512_storeu_ps(out + b, _mm512_permutex2var_ps(lo, even, hi));
        _mm512_storeu_ps(out + b + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
}
inline __m512 bf16_even(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
inline __m512 bf16_odd(__m512i w) { return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int(0xffff0000u)))); }

// As gemv_stream for bf16 weights and split activations xs (x: the same activations unsplit, for the tail).
template <bool kPrefetch>
void gemv_stream_split(const uint16_t *w, int64_t n_in, const float *xs, const float *x, int64_t row_begin, int64_t row_end,
                       const hp_tensor &b, const MatmulOutput &out) {
    constexpr int kAcc = HP_GEMV_ACCS < 2 ? 2 : HP_GEMV_ACCS, kStep = kAcc * 16;
    const int64_t n_split = n_in / 32 * 32;
    for (int64_t row = row_begin; row < row_end; ++row) {
        const uint16_t *w_row = w + row * n_in;
        __m512 acc[kAcc];
        for (int a = 0; a < kAcc; ++a) acc[a] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + kStep <= n_split; k += kStep) {
            if constexpr (kPrefetch && HP_PREFETCH_BYTES > 0) {
                for (int line = 0; line < kStep / 32; ++line) prefetch(reinterpret_cast<const char *>(w_row + k + 32 * line) + HP_PREFETCH_BYTES);
            }
            for (int a = 0; a < kAcc; a += 2) {
                const __m512i wv = _mm512_loadu_si512(w_row + k + a * 16);
                acc[a] = _mm512_fmadd_ps(bf16_even(wv), _mm512_loadu_ps(xs + k + a * 16), acc[a]);
                acc[a + 1] = _mm512_fmadd_ps(bf16_odd(wv), _mm512_loadu_ps(xs + k + a * 16 + 16), acc[a + 1]);
            }
        }
        for (; k < n_split; k += 32) {
            const __m512i wv = _mm512_loadu_si512(w_row + k);
            acc[0] = _mm512_fmadd_ps(bf16_even(wv), _mm512_loadu_ps(xs + k), acc[0]);
            acc[1] = _mm512_fmadd_ps(bf16_odd(wv), _mm512_loadu_ps(xs + k + 16), acc[1]);
        }
        for (int width = kAcc / 2; width >= 1; width /= 2)
            for (int a = 0; a < width; ++a) acc[a] = _mm512_add_ps(acc[a], acc[a + width]);
        float sum = vsum(acc[0]);
        for (; k < n_in; ++k) sum += bf16_to_f32(w_row[k]) * x[k];
        if (b.data) sum += load_any(b.dtype, b.data, row);
        float *y = out.y + row;
        *y = out.accumulate ? *y + sum : sum;
    }
}

// Batch 1 only: splits the activations into scratch and streams the rows; false when they do not fit.
// (Split tiles for several tokens measured slower than widening: 5.9 vs 6.9 GB/s at 4 tokens.)
bool gemv_split(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
                const MatmulOutput &out, MatmulScratch &scratch) {
    const int64_t n_in = w.shape[1];
    if (in.n_token != 1 || !HP_GEMV_STREAM || !scratch.x_split || n_in > scratch.x_split_floats) return false;
    split_activations(in.row(0), n_in, scratch.x_split);
    const auto *weights = static_cast<const uint16_t *>(w.data);
    if (n_in * 2 >= HP_PREFETCH_MIN_ROW_BYTES) gemv_stream_split<true>(weights, n_in, scratch.x_split, in.row(0), row_begin, row_end, b, out);
    else gemv_stream_split<false>(weights, n_in, scratch.x_split, in.row(0), row_begin, row_end, b, out);
    return true;
}
#endif

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
    if (in.n_token == 1 && HP_GEMV_STREAM) {
        if (n_in * int64_t(sizeof(storage_t<D>)) >= HP_PREFETCH_MIN_ROW_BYTES) gemv_stream<D, true>(weights, n_in, in.row(0), row_begin, row_end, b, out);
        else gemv_stream<D, false>(weights, n_in, in.row(0), row_begin, row_end, b, out);
        return;
    }
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
               const MatmulOutput &out, MatmulScratch &scratch) {
#if defined(HP_ISA_AVX512)
    if (kSplit && w.dtype == HP_DTYPE_BF16 && gemv_split(w, b, in, row_begin, row_end, out, scratch)) return;
#endif
    switch (w.dtype) {
        case HP_DTYPE_F32: gemv_typed<HP_DTYPE_F32>(w, b, in, row_begin, row_end, out); break;
        case HP_DTYPE_F16: gemv_typed<HP_DTYPE_F16>(w, b, in, row_begin, row_end, out); break;
        case HP_DTYPE_BF16: gemv_typed<HP_DTYPE_BF16>(w, b, in, row_begin, row_end, out); break;
    }
}

}  // namespace hp_cpu
