// Vector primitives of the CPU baseline, chosen at compile time: AVX-512 (16 floats), AVX2+FMA+F16C
// (8 floats) or scalar (1 float), capped by the knob HP_SIMD_LEVEL. Weights and KV rows stay in
// their stored dtype (bf16/f16/f32) and are widened to float32 in registers by load_w<D>(); all
// arithmetic accumulates in float32. Scalar conversions match the reference bit for bit.
#pragma once

#include <hotpass/forward_abi.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "knobs.h"

// GCC 12 reports its own _mm512_undefined_* helpers as uninitialized (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#if HP_SIMD_LEVEL >= 3 && defined(__AVX512F__) && defined(__AVX512BW__)
#define HP_ISA_AVX512 1
#elif HP_SIMD_LEVEL >= 2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HP_ISA_AVX2 1
#endif

namespace hp_cpu {

inline float bf16_to_f32(uint16_t bits) {
    const uint32_t widened = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof value);
    return value;
}

inline float f16_to_f32(uint16_t bits) {
    const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    float magnitude;
    if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else magnitude = std::ldexp(float(mantissa | 0x400u), int(exponent) - 25);
    return sign ? -magnitude : magnitude;
}

inline uint16_t f32_to_bf16(float value) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

inline uint16_t f32_to_f16(float value) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
    if (abs_bits < 0x38800000u) return sign | uint16_t(std::nearbyint(std::fabs(value) * 16777216.0f));
    const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

// Storage type of a dtype: float for f32, the raw 16 bits for f16/bf16.
template <int D> struct Storage { using type = uint16_t; };
template <> struct Storage<HP_DTYPE_F32> { using type = float; };
template <int D> using storage_t = typename Storage<D>::type;

template <int D> inline float load1(const storage_t<D> *p) {
    if constexpr (D == HP_DTYPE_F32) return *p;
    else if constexpr (D == HP_DTYPE_BF16) return bf16_to_f32(*p);
    else return f16_to_f32(*p);
}

inline float load_any(hp_dtype dtype, const void *data, int64_t i) {
    switch (dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(data)[i];
        case HP_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t *>(data)[i]);
        case HP_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t *>(data)[i]);
    }
    return NAN;
}

inline void store_any(hp_dtype dtype, void *data, int64_t i, float value) {
    switch (dtype) {
        case HP_DTYPE_F32: static_cast<float *>(data)[i] = value; break;
        case HP_DTYPE_F16: static_cast<uint16_t *>(data)[i] = f32_to_f16(value); break;
        case HP_DTYPE_BF16: static_cast<uint16_t *>(data)[i] = f32_to_bf16(value); break;
    }
}

// A software prefetch for reading; HP_PREFETCH_LOCALITY 3: prefetcht0 (into L1), 2: t1 (L2), 1: t2, 0: nta.
inline void prefetch(const void *p) { __builtin_prefetch(p, 0, HP_PREFETCH_LOCALITY); }

#if defined(HP_ISA_AVX512)
constexpr int kWidth = 16;
using vf = __m512;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(vf v) {  // not _mm512_reduce_add_ps: GCC 12 warns inside it
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    __m128 x = _mm512_castps512_ps128(v);
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
template <int D> inline vf load_w(const storage_t<D> *p) {
    if constexpr (D == HP_DTYPE_F32) return _mm512_loadu_ps(p);
    else if constexpr (D == HP_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16));
    else return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
#elif defined(HP_ISA_AVX2)
constexpr int kWidth = 8;
using vf = __m256;
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(vf v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}
template <int D> inline vf load_w(const storage_t<D> *p) {
    if constexpr (D == HP_DTYPE_F32) return _mm256_loadu_ps(p);
    else if constexpr (D == HP_DTYPE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
    else return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
#else
constexpr int kWidth = 1;
using vf = float;
inline vf vzero() { return 0.0f; }
inline vf vset1(float x) { return x; }
inline vf vload(const float *p) { return *p; }
inline void vstore(float *p, vf v) { *p = v; }
inline vf vadd(vf a, vf b) { return a + b; }
inline vf vmul(vf a, vf b) { return a * b; }
inline vf vsub(vf a, vf b) { return a - b; }
inline vf vdiv(vf a, vf b) { return a / b; }
inline vf vfmadd(vf a, vf b, vf c) { return a * b + c; }
inline float vsum(vf v) { return v; }
template <int D> inline vf load_w(const storage_t<D> *p) { return load1<D>(p); }
#endif

// exp(x) for every lane. Vector ISAs: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts), a degree-6
// polynomial for exp(r) (Cephes' expf coefficients, relative error ~2 ulp), scaled by 2^n; the
// reduction and the polynomial are shared, the clamping and the scaling are per ISA.
#if defined(HP_ISA_AVX512) || defined(HP_ISA_AVX2)
inline vf exp_polynomial(vf x, vf n) {
    vf r = vfmadd(n, vset1(-0.693359375f), x);
    r = vfmadd(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfmadd(p, r, vset1(1.3981999507e-3f));
    p = vfmadd(p, r, vset1(8.3334519073e-3f));
    p = vfmadd(p, r, vset1(4.1665795894e-2f));
    p = vfmadd(p, r, vset1(1.6666665459e-1f));
    p = vfmadd(p, r, vset1(5.0000001201e-1f));
    return vfmadd(p, vmul(r, r), vadd(r, vset1(1.0f)));
}
#endif
#if defined(HP_ISA_AVX512)
// exp(-inf) is 0 or the smallest denormal, large inputs overflow to +inf, NaN stays NaN.
inline vf vexp(vf x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN passes (the second operand is returned)
    const vf n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_scalef_ps(exp_polynomial(x, n), n);
}
#elif defined(HP_ISA_AVX2)
// 2^n built in the exponent field: inputs are clamped to [-87.3, 88.4].
inline vf vexp(vf x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);  // NaN passes (the second operand is returned)
    x = _mm256_max_ps(_mm256_set1_ps(-87.3365478515625f), x);
    const vf n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(exp_polynomial(x, n), _mm256_castsi256_ps(scale));
}
#else
inline vf vexp(vf x) { return std::exp(x); }
#endif

// sum_i a[i] * b[i] over float32 vectors.
inline float dot_f32(const float *a, const float *b, int64_t n) {
    vf acc0 = vzero(), acc1 = vzero();
    int64_t i = 0;
    for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
        acc0 = vfmadd(vload(a + i), vload(b + i), acc0);
        acc1 = vfmadd(vload(a + i + kWidth), vload(b + i + kWidth), acc1);
    }
    for (; i + kWidth <= n; i += kWidth) acc0 = vfmadd(vload(a + i), vload(b + i), acc0);
    float sum = vsum(vadd(acc0, acc1));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

// y[i] += alpha * x[i]
inline void axpy_f32(float alpha, const float *x, float *y, int64_t n) {
    const vf a = vset1(alpha);
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) vstore(y + i, vfmadd(a, vload(x + i), vload(y + i)));
    for (; i < n; ++i) y[i] += alpha * x[i];
}

// out[i] = float(row[i]) for a row of dtype D.
template <int D> inline void widen_row(const storage_t<D> *row, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) vstore(out + i, load_w<D>(row + i));
    for (; i < n; ++i) out[i] = load1<D>(row + i);
}

inline void widen_any(hp_dtype dtype, const void *row, int64_t n, float *out) {
    switch (dtype) {
        case HP_DTYPE_F32: widen_row<HP_DTYPE_F32>(static_cast<const float *>(row), n, out); break;
        case HP_DTYPE_F16: widen_row<HP_DTYPE_F16>(static_cast<const uint16_t *>(row), n, out); break;
        case HP_DTYPE_BF16: widen_row<HP_DTYPE_BF16>(static_cast<const uint16_t *>(row), n, out); break;
    }
}

}  // namespace hp_cpu
