// Test helper: streams a synthetic Azure-format trace of any length to disk (one row per 10 ms,
// lengths cycling through fixed ranges), without holding it in memory.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

namespace hp::traffic::testing {

inline void write_azure_trace(const std::filesystem::path &path, uint64_t rows) {
    std::ofstream out(path, std::ios::binary);
    out << "TIMESTAMP,ContextTokens,GeneratedTokens";
    for (uint64_t i = 0; i < rows; ++i) {
        const uint64_t centiseconds = i;  // one row per 10 ms
        const uint64_t seconds = centiseconds / 100;
        out << fmt::format("\r\n2023-11-{:02} {:02}:{:02}:{:02}.{:07},{},{}", 1 + seconds / 86400,
                           seconds / 3600 % 24, seconds / 60 % 60, seconds % 60,
                           centiseconds % 100 * 100000, 1 + i % 5000, 1 + i % 300);
    }
}

}  // namespace hp::traffic::testing
