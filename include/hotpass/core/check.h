// HP_CHECK: a broken invariant (a programmer error) stops the process loudly with file and line.
// It stays on in release builds; it is not for validating input, which returns hp::Error.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#define HP_CHECK(cond, ...)                                                                 \
    do {                                                                                    \
        if (!(cond)) [[unlikely]] {                                                         \
            std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond, \
                         ::fmt::format(__VA_ARGS__).c_str());                               \
            std::abort();                                                                   \
        }                                                                                   \
    } while (0)
