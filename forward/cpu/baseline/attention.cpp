#include "attention.h"

#include <algorithm>
#include <cmath>

#include "simd.h"

namespace hp_cpu {

int64_t attention_scratch_floats(const hp_config &c) {
    const int64_t group = c.n_head / c.n_head_kv;
    // scores [group][block] + widened K/V rows [block][d_head] + acc [group][d_head] + max/sum [group]
    return group * HP_ATTN_BLOCK + int64_t(HP_ATTN_BLOCK) * c.d_head + group * c.d_head + 2 * group + 64;
}

namespace {

// out[j] = q[j] . k over d floats for the four rows q + j * q_stride.
void dot4_f32(const float *q, int64_t q_stride, const float *k, int64_t d, float out[4]) {
    vf a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
    int64_t i = 0;
    for (; i + kWidth <= d; i += kWidth) {
        const vf kv = vload(k + i);
        a0 = vfmadd(vload(q + i), kv, a0);
        a1 = vfmadd(vload(q + q_stride + i), kv, a1);
        a2 = vfmadd(vload(q + 2 * q_stride + i), kv, a2);
        a3 = vfmadd(vload(q + 3 * q_stride + i), kv, a3);
    }
#if defined(HP_ISA_AVX512)
    // Four horizontal sums at once: halves, then pairwise adds across the four.
    const __m256 h0 = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a0), 1)));
    const __m256 h1 = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a1), 1)));
    const __m256 h2 = _mm256_add_ps(_mm512_castps512_ps256(a2), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a2), 1)));
    const __m256 h3 = _mm256_add_ps(_mm512_castps512_ps256(a3), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a3), 1)));
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(h0, h1), _mm256_hadd_ps(h2, h3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
#else
    out[0] = vsum(a0);
    out[1] = vsum(a1);
    out[2] = vsum(a2);
    out[3] = vsum(a3);
#endif
    for (; i < d; ++i) {
        for (int j = 0; j < 4; ++j) out[j] += q[j * q_stride + i] * k[i];
    }
}

// acc[j] += sum_i p[i] * rows[i][j] for j < d, i < n: four vectors of acc stay in registers while
// the n rows stream past (n rows of d floats stay in L1 for the next head).
void weighted_rows_add(const float *p, const float *const *rows, int n, int64_t d, float *acc) {
    int64_t j = 0;
    for (; j + 4 * kWidth <= d; j += 4 * kWidth) {
        vf a0 = vload(acc + j), a1 = vload(acc + j + kWidth), a2 = vload(acc + j + 2 * kWidth), a3 = vload(acc + j + 3 * kWidth);
        for (int i = 0; i < n; ++i) {
            const vf w = vset1(p[i]);
            const float *row = rows[i] + j;
            a0 = vfmadd(w, vload(row), a0);
            a1 = vfmadd(w, vload(row + kWidth), a1);
            a2 = vfmadd(w, vload(row + 2 * kWidth), a2);
            a3 = vfmadd(w, vload(row + 3 * kWidth), a3);
        }
        vstore(acc + j, a0);
        vstore(acc + j + kWidth, a1);
        vstore(acc + j + 2 * kWidth, a2);
        vstore(acc + j + 3 * kWidth, a3);
    }
    for (; j + kWidth <= d; j += kWidth) {
        vf a = vload(acc + j);
        for (int i = 0; i < n; ++i) a = vfmadd(vset1(p[i]), vload(rows[i] + j), a);
        vstore(acc + j, a);
    }
    for (; j < d; ++j) {
        float a = acc[j];
        for (int i = 0; i < n; ++i) a += p[i] * rows[i][j];
        acc[j] = a;
    }
}

template <int D>
void attention_typed(const hp_model &model, int layer, const int32_t *block_table, int position, int kv_head,
                     const float *q, float *out, float *scratch) {
    const hp_config &c = model.config;
    const hp_kv_cache &kv = *model.kv;
    const int group = c.n_head / c.n_head_kv, d_head = c.d_head;
    const int64_t row = int64_t(c.n_head_kv) * d_head;
    const float scale = 1.0f / std::sqrt(float(d_head));
    const auto *k_cache = static_cast<const storage_t<D> *>(kv.k[layer]);
    const auto *v_cache = static_cast<const storage_t<D> *>(kv.v[layer]);

    float *scores = scratch;                          // [group][HP_ATTN_BLOCK]
    float *rows = scores + group * HP_ATTN_BLOCK;     // [HP_ATTN_BLOCK][d_head]
    float *acc = rows + HP_ATTN_BLOCK * d_head;       // [group][d_head]
    float *running_max = acc + group * d_head;        // [group]
    float *running_sum = running_max + group;         // [group]
    const float *q_group = q + int64_t(kv_head) * group * d_head;
    const float *v_rows[HP_ATTN_BLOCK];
    std::fill(acc, acc + group * d_head, 0.0f);
    std::fill(running_max, running_max + group, -INFINITY);
    std::fill(running_sum, running_sum + group, 0.0f);

    auto slot = [&](int p) {
        const int64_t block = block_table[p / kv.block_tokens];
        return (block * kv.block_tokens + p % kv.block_tokens) * row + int64_t(kv_head) * d_head;
    };
    for (int p0 = 0; p0 <= position; p0 += HP_ATTN_BLOCK) {
        const int n = std::min(HP_ATTN_BLOCK, position + 1 - p0);
        for (int i = 0; i < n; ++i) {
            const float *k_row;
            if constexpr (D == HP_DTYPE_F32) {
                k_row = k_cache + slot(p0 + i);
            } else {
                widen_row<D>(k_cache + slot(p0 + i), d_head, rows + i * d_head);
                k_row = rows + i * d_head;
            }
            int h = 0;
            if constexpr (HP_ATTN_KERNEL == 1) {
                // Four heads per pass over the K row: one load of k feeds four dot products.
                for (; h + 4 <= group; h += 4) {
                    float dots[4];
                    dot4_f32(q_group + h * d_head, d_head, k_row, d_head, dots);
                    for (int j = 0; j < 4; ++j) scores[(h + j) * HP_ATTN_BLOCK + i] = dots[j] * scale;
                }
            }
            for (; h < group; ++h) scores[h * HP_ATTN_BLOCK + i] = dot_f32(q_group + h * d_head, k_row, d_head) * scale;
        }
        for (int h = 0; h < group; ++h) {
            float *s = scores + h * HP_ATTN_BLOCK;
            const float block_max = *std::max_element(s, s + n);
            const float new_max = std::max(running_max[h], block_max);
            const float correction = std::exp(running_max[h] - new_max);
            float sum = 0.0f;
            int i = 0;
            if constexpr (HP_VEC_EXP) {
                const vf max_v = vset1(new_max);
                vf sum_v = vzero();
                for (; i + kWidth <= n; i += kWidth) {
                    const vf e = vexp(vsub(vload(s + i), max_v));
                    vstore(s + i, e);
                    sum_v = vadd(sum_v, e);
                }
                sum = vsum(sum_v);
            }
            for (; i < n; ++i) sum += (s[i] = std::exp(s[i] - new_max));
            running_sum[h] = running_sum[h] * correction + sum;
            running_max[h] = new_max;
            if (correction != 1.0f) {
                for (int d = 0; d < d_head; ++d) acc[h * d_head + d] *= correction;
            }
        }
        if constexpr (HP_ATTN_KERNEL == 1) {
            // acc[h] += sum_i p[h][i] v_i with acc slices in registers across the block's positions.
            for (int i = 0; i < n; ++i) {
                if constexpr (D == HP_DTYPE_F32) {
                    v_rows[i] = v_cache + slot(p0 + i);
                } else {
                    widen_row<D>(v_cache + slot(p0 + i), d_head, rows + i * d_head);
                    v_rows[i] = rows + i * d_head;
                }
            }
            for (int h = 0; h < group; ++h) weighted_rows_add(scores + h * HP_ATTN_BLOCK, v_rows, n, d_head, acc + h * d_head);
        } else {
            for (int i = 0; i < n; ++i) {
                const float *v_row;
                if constexpr (D == HP_DTYPE_F32) {
                    v_row = v_cache + slot(p0 + i);
                } else {
                    widen_row<D>(v_cache + slot(p0 + i), d_head, rows + i * d_head);
                    v_row = rows + i * d_head;
                }
                for (int h = 0; h < group; ++h) axpy_f32(scores[h * HP_ATTN_BLOCK + i], v_row, acc + h * d_head, d_head);
            }
        }
    }
    for (int h = 0; h < group; ++h) {
        const float inverse = 1.0f / running_sum[h];
        float *dst = out + (int64_t(kv_head) * group + h) * d_head;
        for (int d = 0; d < d_head; ++d) dst[d] = acc[h * d_head + d] * inverse;
    }
}

}  // namespace

void attention_group(const hp_model &model, int layer, const int32_t *block_table, int position, int kv_head,
                     const float *q, float *out, float *scratch) {
    switch (model.kv->dtype) {
        case HP_DTYPE_F32: attention_typed<HP_DTYPE_F32>(model, layer, block_table, position, kv_head, q, out, scratch); break;
        case HP_DTYPE_F16: attention_typed<HP_DTYPE_F16>(model, layer, block_table, position, kv_head, q, out, scratch); break;
        case HP_DTYPE_BF16: attention_typed<HP_DTYPE_BF16>(model, layer, block_table, position, kv_head, q, out, scratch); break;
    }
}

}  // namespace hp_cpu
