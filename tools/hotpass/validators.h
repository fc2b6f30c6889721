// Validators for numeric CLI options that say the range in words: CLI11's PositiveNumber and Range
// print their bounds with %f (300 digits for a double's maximum). They see the text before CLI11
// converts it, so `-1` for a count gets this message too; CLI11 prefixes the option name.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace hp::cli {

// A whole number of `unit` in [lowest, highest].
inline CLI::Validator whole_number(uint64_t lowest, uint64_t highest, std::string_view unit) {
    const std::string message =
        fmt::format("must be a whole number of {} from {} to {}", unit, lowest, highest);
    return CLI::Validator(
        [=](std::string &text) -> std::string {
            uint64_t value = 0;
            const auto [end, code] = std::from_chars(text.data(), text.data() + text.size(), value);
            const bool whole = code == std::errc() && end == text.data() + text.size();
            if (whole && value >= lowest && value <= highest) return "";
            return fmt::format("{}, got `{}`", message, text);
        },
        "");
}

// A finite number of `unit` in [lowest, highest], or in (lowest, highest] when `lowest_excluded`;
// `why` (may be empty) tells the user what the bound means.
inline CLI::Validator finite_number(double lowest, bool lowest_excluded, double highest,
                                    std::string_view unit, std::string_view why = "") {
    std::string message = fmt::format("must be a finite number of {} {} {}", unit,
                                      lowest_excluded ? ">" : ">=", lowest);
    if (highest < std::numeric_limits<double>::max()) message += fmt::format(" and <= {}", highest);
    if (!why.empty()) message += fmt::format(" ({})", why);
    return CLI::Validator(
        [=](std::string &text) -> std::string {
            double value = 0;
            const auto [end, code] = std::from_chars(text.data(), text.data() + text.size(), value);
            const bool number = code == std::errc() && end == text.data() + text.size();
            const bool above = lowest_excluded ? value > lowest : value >= lowest;
            if (number && std::isfinite(value) && above && value <= highest) return "";
            return fmt::format("{}, got `{}`", message, text);
        },
        "");
}

// Counts that fit the int options they fill.
inline CLI::Validator count(uint64_t lowest, std::string_view unit) {
    return whole_number(lowest, uint64_t(std::numeric_limits<int32_t>::max()), unit);
}
// Seconds > 0.
inline CLI::Validator seconds() {
    return finite_number(0, true, std::numeric_limits<double>::max(), "seconds");
}

}  // namespace hp::cli
