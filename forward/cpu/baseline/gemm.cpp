// The prefill kernel: a blocked GEMM, y[M][N] = x[M][K] W[N][K]^T, over one thread's rows of W.
// Per block of HP_GEMM_NC weight rows x HP_GEMM_KC depth the weights are widened once into an f32
// panel [NC/NR][KC][NR] (so bf16/f16 conversion is amortised over up to HP_GEMM_MC tokens),
// activations are packed [MC/MR][KC][MR] once per k block, and an MR x NR register micro-kernel
// accumulates in float32. Partial
// tiles are zero-padded in the panels and only their valid part is written back.
#include <algorithm>

#include "matmul.h"
#include "simd.h"

namespace hp_cpu {
namespace {

constexpr int kMR = HP_GEMM_MR, kNR = HP_GEMM_NR, kKC = HP_GEMM_KC, kNC = HP_GEMM_NC, kMC = HP_GEMM_MC;

#if defined(HP_ISA_AVX512)
// r[i][j] <- r[j][i] for a 16 x 16 float tile held in 16 registers.
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 16; i += 8) {
        for (int j = 0; j < 4; ++j) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    }
    for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}
#endif

// wp[j][k][c] = W[n0 + j*NR + c][k0 + k], zero past nb rows.
template <int D>
void pack_weights(const storage_t<D> *w, int64_t n_in, int64_t n0, int64_t nb, int64_t k0, int64_t kb, float *wp) {
    alignas(64) float row[kKC];
    const int64_t n_panel = (nb + kNR - 1) / kNR;
    for (int64_t j = 0; j < n_panel; ++j) {
        float *panel = wp + j * kb * kNR;
        int c_done = 0;
#if defined(HP_ISA_AVX512)
        // Whole groups of 16 rows: widen 16 x 16 tiles in registers and transpose them.
        if (HP_GEMM_PACK_SIMD) {
            const int64_t k_vec = kb / 16 * 16;
            for (; c_done + 16 <= kNR && j * kNR + c_done + 16 <= nb; c_done += 16) {
                const storage_t<D> *src = w + (n0 + j * kNR + c_done) * n_in + k0;
                for (int64_t k = 0; k < k_vec; k += 16) {
                    __m512 r[16];
                    for (int i = 0; i < 16; ++i) r[i] = load_w<D>(src + i * n_in + k);
                    transpose16(r);
                    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(panel + (k + i) * kNR + c_done, r[i]);
                }
                for (int64_t k = k_vec; k < kb; ++k)
                    for (int i = 0; i < 16; ++i) panel[k * kNR + c_done + i] = load1<D>(src + i * n_in + k);
            }
        }
#endif
        for (int c = c_done; c < kNR; ++c) {
            const int64_t n = j * kNR + c;
            if (n < nb) {
                widen_row<D>(w + (n0 + n) * n_in + k0, kb, row);
                for (int64_t k = 0; k < kb; ++k) panel[k * kNR + c] = row[k];
            } else {
                for (int64_t k = 0; k < kb; ++k) panel[k * kNR + c] = 0.0f;
            }
        }
    }
}

// xp[i][k][r] = x[m0 + i*MR + r][k0 + k], zero past mb tokens.
void pack_activations(const MatmulInput &in, int64_t m0, int64_t mb, int64_t k0, int64_t kb, float *xp) {
    const int64_t n_panel = (mb + kMR - 1) / kMR;
    int64_t i = 0;
#if defined(HP_ISA_AVX512)
    // Two 8-token panels at a time: 16 x 16 register transposes, each half of a result row to one panel.
    if (HP_GEMM_PACK_SIMD && kMR == 8) {
        const int64_t k_vec = kb / 16 * 16;
        for (; (i + 2) * kMR <= mb; i += 2) {
            const float *src[16];
            for (int r = 0; r < 16; ++r) src[r] = in.row(m0 + i * kMR + r) + k0;
            float *lo = xp + i * kb * kMR, *hi = lo + kb * kMR;
            for (int64_t k = 0; k < k_vec; k += 16) {
                __m512 t[16];
                for (int r = 0; r < 16; ++r) t[r] = _mm512_loadu_ps(src[r] + k);
                transpose16(t);
                for (int j = 0; j < 16; ++j) {
                    _mm256_storeu_ps(lo + (k + j) * kMR, _mm512_castps512_ps256(t[j]));
                    _mm256_storeu_ps(hi + (k + j) * kMR, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[j]), 1)));
                }
            }
            for (int64_t k = k_vec; k < kb; ++k) {
                for (int r = 0; r < 8; ++r) {
                    lo[k * kMR + r] = src[r][k];
                    hi[k * kMR + r] = src[8 + r][k];
                }
            }
        }
    }
#endif
    for (; i < n_panel; ++i) {
        float *panel = xp + i * kb * kMR;
        for (int r = 0; r < kMR; ++r) {
            const int64_t m = i * kMR + r;
            if (m < mb) {
                const float *src = in.row(m0 + m) + k0;
                for (int64_t k = 0; k < kb; ++k) panel[k * kMR + r] = src[k];
            } else {
                for (int64_t k = 0; k < kb; ++k) panel[k * kMR + r] = 0.0f;
            }
        }
    }
}

// c[r][n] (+)= sum_k xp[k][r] * wp[k][n] (+ bias[n]) for r < m_valid, n < n_valid.
void micro_kernel(int64_t kb, const float *xp, const float *wp, float *c, int64_t c_stride, int m_valid, int n_valid,
                  bool add_to_c, const float *bias) {
    constexpr int kNV = kNR / kWidth;
    vf acc[kMR][kNV];
    for (int r = 0; r < kMR; ++r)
        for (int v = 0; v < kNV; ++v) acc[r][v] = vzero();
    for (int64_t k = 0; k < kb; ++k) {
        vf wv[kNV];
        for (int v = 0; v < kNV; ++v) wv[v] = vload(wp + k * kNR + v * kWidth);
        for (int r = 0; r < kMR; ++r) {
            const vf xb = vset1(xp[k * kMR + r]);
            for (int v = 0; v < kNV; ++v) acc[r][v] = vfmadd(wv[v], xb, acc[r][v]);
        }
    }
    if (bias) {
        for (int v = 0; v < kNV; ++v) {
            const vf bv = vload(bias + v * kWidth);
            for (int r = 0; r < kMR; ++r) acc[r][v] = vadd(acc[r][v], bv);
        }
    }
    if (m_valid == kMR && n_valid == kNR) {
        for (int r = 0; r < kMR; ++r) {
            for (int v = 0; v < kNV; ++v) {
                float *dst = c + r * c_stride + v * kWidth;
                vstore(dst, add_to_c ? vadd(vload(dst), acc[r][v]) : acc[r][v]);
            }
        }
        return;
    }
    alignas(64) float tile[kMR][kNR];
    for (int r = 0; r < kMR; ++r)
        for (int v = 0; v < kNV; ++v) vstore(&tile[r][v * kWidth], acc[r][v]);
    for (int r = 0; r < m_valid; ++r) {
        for (int n = 0; n < n_valid; ++n) c[r * c_stride + n] = add_to_c ? c[r * c_stride + n] + tile[r][n] : tile[r][n];
    }
}

template <int D>
void gemm_typed(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
                const MatmulOutput &out, MatmulScratch &scratch) {
    const auto *weights = static_cast<const storage_t<D> *>(w.data);
    const int64_t n_in = w.shape[1], n_token = in.n_token;
    alignas(64) float bias[kNC + kNR];
    // Activations of up to MC tokens are packed once per k block and reused by every weight
    // block; each weight block is packed once per MC tokens and reused by all of them.
    for (int64_t m0 = 0; m0 < n_token; m0 += kMC) {
        const int64_t mb = std::min<int64_t>(kMC, n_token - m0);
        for (int64_t k0 = 0; k0 < n_in; k0 += kKC) {
            const int64_t kb = std::min<int64_t>(kKC, n_in - k0);
            pack_activations(in, m0, mb, k0, kb, scratch.x_pack);
            const bool add_to_c = out.accumulate || k0 > 0;
            for (int64_t n0 = row_begin; n0 < row_end; n0 += kNC) {
                const int64_t nb = std::min<int64_t>(kNC, row_end - n0);
                const bool with_bias = b.data && k0 == 0;
                if (with_bias) {
                    for (int64_t n = 0; n < kNC + kNR; ++n) bias[n] = n < nb ? load_any(b.dtype, b.data, n0 + n) : 0.0f;
                }
                pack_weights<D>(weights, n_in, n0, nb, k0, kb, scratch.w_pack);
                for (int64_t j = 0; j * kNR < nb; ++j) {
                    for (int64_t i = 0; i * kMR < mb; ++i) {
                        micro_kernel(kb, scratch.x_pack + i * kb * kMR, scratch.w_pack + j * kb * kNR,
                                     out.y + (m0 + i * kMR) * out.y_stride + n0 + j * kNR, out.y_stride,
                                     int(std::min<int64_t>(kMR, mb - i * kMR)), int(std::min<int64_t>(kNR, nb - j * kNR)),
                                     add_to_c, with_bias ? bias + j * kNR : nullptr);
                    }
                }
            }
        }
    }
}

}  // namespace

void gemm_rows(const hp_tensor &w, const hp_tensor &b, const MatmulInput &in, int64_t row_begin, int64_t row_end,
               const MatmulOutput &out, MatmulScratch &scratch) {
    switch (w.dtype) {
        case HP_DTYPE_F32: gemm_typed<HP_DTYPE_F32>(w, b, in, row_begin, row_end, out, scratch); break;
        case HP_DTYPE_F16: gemm_typed<HP_DTYPE_F16>(w, b, in, row_begin, row_end, out, scratch); break;
        case HP_DTYPE_BF16: gemm_typed<HP_DTYPE_BF16>(w, b, in, row_begin, row_end, out, scratch); break;
    }
}

}  // namespace hp_cpu
