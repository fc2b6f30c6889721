#include "norm_rope.h"

#include <cmath>
#include <vector>

#include "simd.h"

namespace hp_cpu {

void rms_norm(const float *x, const float *weight, float eps, int64_t n, float *y) {
    const float sum_sq = dot_f32(x, x, n);
    const float scale = 1.0f / std::sqrt(sum_sq / float(n) + eps);
    const vf scale_v = vset1(scale);
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) vstore(y + i, vmul(vmul(vload(x + i), scale_v), vload(weight + i)));
    for (; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void rope_inv_freq(const hp_config &config, float *inv_freq) {
    const int half = config.d_head / 2;
    for (int i = 0; i < half; ++i) inv_freq[i] = 1.0f / std::pow(config.rope_theta, float(2 * i) / float(config.d_head));
    if (config.rope_type != HP_ROPE_LLAMA3) return;
    const float original = float(config.rope_original_max_position);
    const float low_freq_wavelen = original / config.rope_low_freq_factor;
    const float high_freq_wavelen = original / config.rope_high_freq_factor;
    for (int i = 0; i < half; ++i) {
        float &freq = inv_freq[i];
        const float wavelen = 2.0f * float(M_PI) / freq;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
            freq = freq / config.rope_factor;
            continue;
        }
        const float smooth = (original / wavelen - config.rope_low_freq_factor) /
                             (config.rope_high_freq_factor - config.rope_low_freq_factor);
        freq = (1.0f - smooth) * freq / config.rope_factor + smooth * freq;
    }
}

void rope_angles(const float *inv_freq, int half, int position, float *cos_a, float *sin_a) {
    for (int i = 0; i < half; ++i) {
        const float angle = float(position) * inv_freq[i];
        cos_a[i] = std::cos(angle);
        sin_a[i] = std::sin(angle);
    }
}

void apply_rope(float *head, int d_head, const float *cos_a, const float *sin_a) {
    const int half = d_head / 2;
    for (int i = 0; i < half; ++i) {
        const float first = head[i], second = head[i + half];
        head[i] = first * cos_a[i] - second * sin_a[i];
        head[i + half] = second * cos_a[i] + first * sin_a[i];
    }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void silu_mul(float *a, const float *b, int64_t n) {
    int64_t i = 0;
    if constexpr (HP_VEC_EXP) {
        const vf one = vset1(1.0f);
        for (; i + kWidth <= n; i += kWidth) {
            const vf x = vload(a + i);
            vstore(a + i, vmul(vdiv(x, vadd(one, vexp(vsub(vzero(), x)))), vload(b + i)));
        }
    }
    for (; i < n; ++i) a[i] = silu(a[i]) * b[i];
}

}  // namespace hp_cpu
