#include "hotpass/core/hash.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cmath>
#include <new>

namespace hp {

uint64_t hash64(const void *data, size_t size, uint64_t seed) {
    return XXH3_64bits_withSeed(data, size, seed);
}

Hasher64::Hasher64(uint64_t seed) : state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
    XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t *>(state_), seed);
}

Hasher64::~Hasher64() { XXH3_freeState(static_cast<XXH3_state_t *>(state_)); }

void Hasher64::add(const void *data, size_t size) {
    if (size) XXH3_64bits_update(static_cast<XXH3_state_t *>(state_), data, size);
}

uint64_t Hasher64::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t *>(state_)); }

std::string hash_hex(std::string_view text) {
    const XXH128_hash_t digest = XXH3_128bits(text.data(), text.size());
    return fmt::format("{:016x}{:016x}", digest.high64, digest.low64);
}

float normal_at(uint64_t key, uint64_t index) {
    const uint64_t bits = splitmix64(key ^ splitmix64(index));
    // Two 32-bit uniforms in (0, 1]; the first is never 0 so log() is finite.
    const double u1 = (double(uint32_t(bits)) + 1.0) / 4294967296.0;
    const double u2 = double(uint32_t(bits >> 32)) / 4294967296.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace hp
