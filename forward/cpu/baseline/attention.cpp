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
            for (int h = 0; h < group; ++h) scores[h * HP_ATTN_BLOCK + i] = dot_f32(q_group + h * d_head, k_row, d_head) * scale;
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
