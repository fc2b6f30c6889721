// Strict parsing of the fields of a CSV row: a field is accepted only when all of it (after
// trimming spaces) is a number of the expected kind. Used by the CSV trace readers.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::traffic {

// Splits on commas (no quoting: the supported CSV traces never quote). Fields keep their spaces.
void split_csv(std::string_view line, std::vector<std::string_view> &fields);

std::string_view trim_spaces(std::string_view text);

// A token count: a non-negative integer below kMaxRequestTokens. `name` is for the message.
Result<uint32_t> parse_token_count(std::string_view field, std::string_view name);
Result<double> parse_seconds(std::string_view field, std::string_view name);
// "YYYY-MM-DD HH:MM:SS[.fraction]" (any number of fraction digits) as seconds since the Unix
// epoch, read as UTC.
Result<double> parse_datetime_seconds(std::string_view field);

}  // namespace hp::traffic
