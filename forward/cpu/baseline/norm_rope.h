// Elementwise pieces of a layer, as in the reference: RMSNorm, rotary embedding (rotate_half pairs
// i and i + d_head/2, Llama 3 frequency scaling) and SiLU. Norm weights arrive widened to f32.
#pragma once

#include <hotpass/forward_abi.h>

#include <cstdint>

namespace hp_cpu {

// y = x / sqrt(mean(x^2) + eps) * weight, over n elements (y may alias x).
void rms_norm(const float *x, const float *weight, float eps, int64_t n, float *y);

// inv_freq[i] = theta^(-2i/d_head) with Llama 3 scaling when configured; d_head/2 entries.
void rope_inv_freq(const hp_config &config, float *inv_freq);

// cos/sin of position * inv_freq[i] for i < half, computed once per token for all its heads.
void rope_angles(const float *inv_freq, int half, int position, float *cos_a, float *sin_a);
void apply_rope(float *head, int d_head, const float *cos_a, const float *sin_a);

float silu(float x);
// a[i] = silu(a[i]) * b[i]
void silu_mul(float *a, const float *b, int64_t n);

}  // namespace hp_cpu
