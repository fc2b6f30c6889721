#include "hotpass/core/dtype.h"

#include <cmath>

namespace hp {

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::bf16: return 2;
    }
    return 0;
}

std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "F32";
        case DType::f16: return "F16";
        case DType::bf16: return "BF16";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    if (name == "F32") return DType::f32;
    if (name == "F16") return DType::f16;
    if (name == "BF16") return DType::bf16;
    return std::nullopt;
}

float f16_to_f32(uint16_t bits) {
    const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    uint32_t out;
    if (exponent == 0) {
        if (mantissa == 0) {
            out = sign;
        } else {  // subnormal: value = mantissa * 2^-24
            float value = std::ldexp(float(mantissa), -24);
            std::memcpy(&out, &value, sizeof out);
            out |= sign;
        }
    } else if (exponent == 31) {
        out = sign | 0x7f800000u | (mantissa << 13);
    } else {
        out = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float value;
    std::memcpy(&value, &out, sizeof value);
    return value;
}

uint16_t f32_to_f16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;  // NaN
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. inf) after rounding
    if (abs_bits < 0x38800000u) {                         // f16 subnormal or zero
        const float scaled = std::fabs(value) * 16777216.0f;  // 2^24: units of the f16 subnormal
        return sign | uint16_t(std::nearbyint(scaled));
    }
    uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

}  // namespace hp
