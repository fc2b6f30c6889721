#include "hotpass/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace hp {
namespace {

TEST(DType, Bf16RoundTripIsExactForEveryBf16Value) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const float value = bf16_to_f32(uint16_t(bits));
        if (std::isnan(value)) continue;
        ASSERT_EQ(f32_to_bf16(value), bits) << bits;
    }
}

TEST(DType, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256.0f), f32_to_bf16(1.0f));  // tie: down to even
    EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256.0f), f32_to_bf16(1.0f + 4.0f / 256.0f));  // tie: up
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripIsExactForEveryF16Value) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const float value = f16_to_f32(uint16_t(bits));
        if (std::isnan(value)) continue;
        ASSERT_EQ(f32_to_f16(value), bits) << bits;
    }
}

TEST(DType, F16KnownValues) {
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DType, NamesRoundTrip) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
    }
    EXPECT_FALSE(dtype_from_name("I8").has_value());
}

}  // namespace
}  // namespace hp
