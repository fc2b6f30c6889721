// Content hashing (xxHash3) and deterministic random streams derived from a seed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hp {

uint64_t hash64(const void *data, size_t size, uint64_t seed = 0);
inline uint64_t hash64(std::string_view text, uint64_t seed = 0) {
    return hash64(text.data(), text.size(), seed);
}
std::string hash_hex(std::string_view text);  // 32 hex digits of xxh128

// hash64 of the concatenation of the pieces given to add(), without building it (xxHash3's streaming
// state: the same digest as the one-shot hash of the same bytes).
class Hasher64 {
public:
    explicit Hasher64(uint64_t seed = 0);
    ~Hasher64();
    Hasher64(const Hasher64 &) = delete;
    Hasher64 &operator=(const Hasher64 &) = delete;
    void add(const void *data, size_t size);
    uint64_t digest() const;

private:
    void *state_;  // XXH3_state_t
};

// splitmix64: a counter-based generator; value i of a stream depends only on (key, i), so a
// tensor can be generated in parallel, in any order, or on another device, bit for bit.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A standard normal sample, element `index` of the stream `key` (Box-Muller on two uniforms).
float normal_at(uint64_t key, uint64_t index);

}  // namespace hp
