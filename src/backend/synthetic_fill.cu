// The synthetic-weight kernel: regenerates preset weights on the device bit for bit with the host.
//
// Bit-exactness with the host (hp::normal_at + model::synthesize_tensor): the same splitmix64
// counter stream and Box-Muller in double precision; the float result is combined as
// mean + std * x with explicit round-to-nearest intrinsics so nvcc cannot contract it into an FMA
// (the host is built without contraction), then rounded to bf16/f16 by the host's bit recipes.
// CUDA's double log/cos are within 1-2 ulp of glibc's, so a float-level difference needs a
// double result within a few double ulps of a float rounding boundary (about 1 in 5e8 values, and
// bf16 rounding hides almost all of those); tests/gpu/test_synthetic_device.cpp checks the presets
// bit for bit. Plain CUDA C++ (no fmt): nvcc compiles this file alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "synthetic_fill.h"

namespace hp::backend {
namespace {

__device__ inline uint64_t device_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__device__ inline float device_normal_at(uint64_t key, uint64_t index) {
    const uint64_t bits = device_splitmix64(key ^ device_splitmix64(index));
    const double u1 = __ddiv_rn(__dadd_rn(double(uint32_t(bits)), 1.0), 4294967296.0);
    const double u2 = __ddiv_rn(double(uint32_t(bits >> 32)), 4294967296.0);
    const double radius = sqrt(__dmul_rn(-2.0, log(u1)));
    return float(__dmul_rn(radius, cos(__dmul_rn(6.283185307179586, u2))));
}

__device__ inline uint16_t device_f32_to_bf16(float value) {
    uint32_t bits = __float_as_uint(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

__device__ inline uint16_t device_f32_to_f16(float value) {
    const uint32_t bits = __float_as_uint(value);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
    if (abs_bits < 0x38800000u) return sign | uint16_t(__float2uint_rn(__fmul_rn(fabsf(value), 16777216.0f)));
    const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

// dtype: 0 f32, 1 f16, 2 bf16 (hp::DType's values).
__global__ void fill_normal_kernel(void *out, int dtype, uint64_t n, uint64_t key, float mean, float std) {
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float value = std == 0.0f ? mean : __fadd_rn(mean, __fmul_rn(std, device_normal_at(key, i)));
        if (dtype == 0) static_cast<float *>(out)[i] = value;
        else if (dtype == 1) static_cast<uint16_t *>(out)[i] = device_f32_to_f16(value);
        else static_cast<uint16_t *>(out)[i] = device_f32_to_bf16(value);
    }
}

}  // namespace

cudaError_t launch_fill_normal(void *out, int dtype, uint64_t n, uint64_t key, float mean, float std, int n_sm, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const int threads = 256;
    const uint64_t blocks = std::min<uint64_t>((n + threads - 1) / threads, uint64_t(std::max(n_sm, 1)) * 64);
    fill_normal_kernel<<<unsigned(blocks), threads, 0, stream>>>(out, dtype, n, key, mean, std);
    return cudaGetLastError();
}

}  // namespace hp::backend
