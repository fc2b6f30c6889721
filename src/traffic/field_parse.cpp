// Field parsing with std::from_chars: locale-free and all-or-nothing.
#include "hotpass/traffic/field_parse.h"

#include <charconv>
#include <cmath>

#include "hotpass/traffic/request.h"

namespace hp::traffic {

void split_csv(std::string_view line, std::vector<std::string_view> &fields) {
    fields.clear();
    size_t start = 0;
    for (;;) {
        const size_t comma = line.find(',', start);
        if (comma == std::string_view::npos) {
            fields.push_back(line.substr(start));
            return;
        }
        fields.push_back(line.substr(start, comma - start));
        start = comma + 1;
    }
}

std::string_view trim_spaces(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
        text.remove_suffix(1);
    return text;
}

Result<uint32_t> parse_token_count(std::string_view field, std::string_view name) {
    field = trim_spaces(field);
    if (field.empty()) return error("{} is missing", name);
    if (field.front() == '-') return error("{} is negative ({})", name, field);
    uint64_t value = 0;
    const auto [end, code] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (code != std::errc() || end != field.data() + field.size())
        return error("{} is not an integer ({:.40})", name, field);
    if (value >= kMaxRequestTokens) return error("{} is implausibly large ({})", name, value);
    return uint32_t(value);
}

Result<double> parse_seconds(std::string_view field, std::string_view name) {
    field = trim_spaces(field);
    if (field.empty()) return error("{} is missing", name);
    double value = 0;
    const auto [end, code] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (code != std::errc() || end != field.data() + field.size() || !std::isfinite(value))
        return error("{} is not a number ({:.40})", name, field);
    return value;
}

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t year, unsigned month, unsigned day) {
    year -= month <= 2;
    const int64_t era = (year >= 0 ? year : year - 399) / 400;
    const unsigned year_of_era = unsigned(year - era * 400);
    const unsigned day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    const unsigned day_of_era =
        year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + int64_t(day_of_era) - 719468;
}

bool read_digits(std::string_view text, size_t at, size_t count, int &value) {
    if (at + count > text.size()) return false;
    value = 0;
    for (size_t i = at; i < at + count; ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
        value = value * 10 + (text[i] - '0');
    }
    return true;
}

}  // namespace

Result<double> parse_datetime_seconds(std::string_view field) {
    field = trim_spaces(field);
    int year, month, day, hour, minute, second;
    const bool shape_ok = field.size() >= 19 && read_digits(field, 0, 4, year) && field[4] == '-' &&
                          read_digits(field, 5, 2, month) && field[7] == '-' &&
                          read_digits(field, 8, 2, day) && (field[10] == ' ' || field[10] == 'T') &&
                          read_digits(field, 11, 2, hour) && field[13] == ':' &&
                          read_digits(field, 14, 2, minute) && field[16] == ':' &&
                          read_digits(field, 17, 2, second);
    if (!shape_ok || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
        second > 60)
        return error("timestamp is not YYYY-MM-DD HH:MM:SS ({:.40})", field);
    double fraction = 0, scale = 0.1;
    if (field.size() > 19) {
        if (field[19] != '.' || field.size() == 20)
            return error("timestamp has a bad fraction ({:.40})", field);
        for (size_t i = 20; i < field.size(); ++i, scale *= 0.1) {
            if (field[i] < '0' || field[i] > '9')
                return error("timestamp has a bad fraction ({:.40})", field);
            fraction += (field[i] - '0') * scale;
        }
    }
    const int64_t days = days_from_civil(year, unsigned(month), unsigned(day));
    return double(days * 86400 + hour * 3600 + minute * 60 + second) + fraction;
}

}  // namespace hp::traffic
