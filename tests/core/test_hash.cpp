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

TEST(Hash, StreamingEqualsOneShotOverTheConcatenation) {
    std::string bytes;
    for (int i = 0; i < 5000; ++i) bytes.push_back(char(splitmix64(uint64_t(i)) & 0xff));
    for (uint64_t seed : {0ull, 7ull}) {
        Hasher64 hasher(seed);
        // Pieces of uneven sizes, an empty one among them, crossing xxHash3's internal block sizes.
        size_t at = 0;
        for (size_t piece : {size_t(1), size_t(0), size_t(63), size_t(300), size_t(1024), size_t(3612)}) {
            hasher.add(bytes.data() + at, piece);
            at += piece;
        }
        ASSERT_EQ(at, bytes.size());
        EXPECT_EQ(hasher.digest(), hash64(bytes, seed));
        EXPECT_EQ(hasher.digest(), hash64(bytes, seed));  // digest() leaves the state as it was
    }
    Hasher64 a, b;
    a.add(bytes.data(), 10);
    b.add(bytes.data(), 11);
    EXPECT_NE(a.digest(), b.digest());
}

}  // namespace
}  // namespace hp
