#include "hotpass/core/hash.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hp {
namespace {

TEST(Hash, NormalStreamIsDeterministicAndStandard) {
    double sum = 0, sum_sq = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        const float x = normal_at(42, uint64_t(i));
        ASSERT_EQ(x, normal_at(42, uint64_t(i)));
        ASSERT_TRUE(std::isfinite(x));
        sum += x;
        sum_sq += double(x) * x;
    }
    const double mean = sum / n, variance = sum_sq / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.01);
    EXPECT_NEAR(variance, 1.0, 0.02);
    EXPECT_NE(normal_at(42, 0), normal_at(43, 0));
}

TEST(Hash, HexDigestIsStableAndDistinct) {
    EXPECT_EQ(hash_hex("abc"), hash_hex("abc"));
    EXPECT_NE(hash_hex("abc"), hash_hex("abd"));
    EXPECT_EQ(hash_hex("abc").size(), 32u);
}

}  // namespace
}  // namespace hp
