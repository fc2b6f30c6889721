// Helpers shared by the kernel tests of tests/gpu (test_cuda_gemv.cu, test_cuda_attention.cu),
// which compile the CUDA baseline's kernel headers directly: the device check they skip on, the
// CUDA-call assertion, 16-bit conversions (bf16 through hotpass's own, the same bits as the
// plugin's host side; f16 through CUDA's), and an upload into fresh device memory.
#pragma once

#include <gtest/gtest.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <hotpass/core/dtype.h>

namespace hp_cuda_test {

inline bool have_device() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// bf16 bits of a float, rounded to nearest even, and back (exact).
inline uint16_t to_bf16_bits(float value) { return hp::f32_to_bf16(value); }
inline float from_bf16_bits(uint16_t bits) { return hp::bf16_to_f32(bits); }

// IEEE half from float (round to nearest even) and back.
inline uint16_t to_f16_bits(float value) {
    const __half h = __float2half_rn(value);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}
inline float from_f16_bits(uint16_t bits) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
}

// A device copy of `host`, starting `offset_elements` past a fresh allocation (16 bytes of slack
// at the end); nullptr when the allocation fails. Free with cudaFree(ptr - offset_elements).
template <class T>
T *upload(const std::vector<T> &host, size_t offset_elements = 0) {
    void *ptr = nullptr;
    if (cudaMalloc(&ptr, (host.size() + offset_elements) * sizeof(T) + 16) != cudaSuccess) return nullptr;
    T *at = static_cast<T *>(ptr) + offset_elements;
    cudaMemcpy(at, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return at;
}

}  // namespace hp_cuda_test

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
