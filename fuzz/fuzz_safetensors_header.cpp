// libFuzzer target: parse_safetensors_header() on arbitrary bytes taken as the start of a file,
// under several file sizes (the input's own size, one byte either side, header-only, the size the
// header's offsets imply, absurd sizes) and a truncated prefix. Any header it accepts must satisfy
// the documented contract, checked independently here; a violation aborts like a crash.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>

#include "hotpass/model/safetensors.h"

namespace {

void require(bool condition, const char *what, uint64_t file_size) {
    if (condition) return;
    std::fprintf(stderr, "contract violated (file_size %llu): %s\n", static_cast<unsigned long long>(file_size), what);
    std::abort();
}

uint64_t element_size(std::string_view dtype) {
    if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E5M2" || dtype == "F8_E4M3") return 1;
    if (dtype == "I16" || dtype == "U16" || dtype == "F16" || dtype == "BF16") return 2;
    if (dtype == "I32" || dtype == "U32" || dtype == "F32") return 4;
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    return 0;
}

uint64_t declared_header_bytes(std::string_view prefix) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(prefix[size_t(i)]);
    return n;
}

// The data-section size the header's offsets describe (largest data_offsets end), found with a
// lenient parse so that a header copied from a real, much larger file can still be accepted.
uint64_t implied_data_bytes(std::string_view prefix) {
    const uint64_t header_bytes = declared_header_bytes(prefix);
    if (header_bytes > prefix.size() - 8) return 0;
    const std::string_view text = prefix.substr(8, header_bytes);
    const auto root = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (!root.is_object()) return 0;
    uint64_t end = 0;
    for (const auto &item : root.items()) {
        const auto &info = item.value();
        if (!info.is_object() || !info.contains("data_offsets")) continue;
        const auto &offsets = info["data_offsets"];
        if (offsets.is_array() && offsets.size() == 2 && offsets[1].is_number_unsigned()) {
            end = std::max(end, offsets[1].get<uint64_t>());
        }
    }
    return end;
}

void check_accepted(const hp::model::SafetensorsHeader &header, std::string_view prefix, uint64_t file_size) {
    const uint64_t header_bytes = declared_header_bytes(prefix);
    require(header_bytes <= hp::model::kSafetensorsMaxHeaderBytes, "header over 100 MB accepted", file_size);
    require(header.data_offset == 8 + header_bytes, "data_offset != 8 + header length", file_size);
    require(header.data_offset <= file_size, "header runs past the end of the file", file_size);
    require(header.data_offset <= prefix.size(), "header accepted from a truncated prefix", file_size);
    std::set<std::string> names;
    uint64_t expected_begin = 0;
    for (const auto &entry : header.entries) {
        require(names.insert(entry.name).second, "duplicate tensor name accepted", file_size);
        require(entry.name != "__metadata__", "__metadata__ taken as a tensor", file_size);
        const uint64_t size = element_size(entry.dtype_name);
        require(size != 0, "unknown dtype accepted", file_size);
        require(entry.begin == expected_begin, "data_offsets not contiguous from 0", file_size);
        require(entry.end >= entry.begin, "data_offsets end before begin", file_size);
        unsigned __int128 n_byte = size;  // exact: shape extents are < 2^63 and few
        for (int64_t extent : entry.shape) {
            require(extent >= 0, "negative extent accepted", file_size);
            n_byte *= uint64_t(extent);
            if (n_byte > (unsigned __int128)UINT64_MAX) n_byte = (unsigned __int128)UINT64_MAX + 1;
        }
        require(n_byte == entry.end - entry.begin, "byte count != product(shape) x dtype size", file_size);
        require((header.data_offset + entry.begin) % size == 0, "misaligned tensor data accepted", file_size);
        expected_begin = entry.end;
    }
    require(expected_begin == file_size - header.data_offset, "tensor data does not end at the end of the file", file_size);
}

void parse_and_check(std::string_view prefix, uint64_t file_size) {
    auto header = hp::model::parse_safetensors_header(prefix, file_size);
    if (header.ok()) {
        check_accepted(*header, prefix, file_size);
    } else {
        require(!header.error().empty(), "empty error message", file_size);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view prefix(reinterpret_cast<const char *>(data), size);
    const uint64_t n = size;
    for (uint64_t file_size : {n, n + 1, n + 4096, uint64_t(0), uint64_t(7), UINT64_MAX, uint64_t(1) << 40}) {
        parse_and_check(prefix, file_size);
    }
    if (n > 0) parse_and_check(prefix, n - 1);
    if (n >= 8) {
        const uint64_t header_end = 8 + declared_header_bytes(prefix);
        if (header_end >= 8) {  // no wrap
            parse_and_check(prefix, header_end);
            const uint64_t data_bytes = implied_data_bytes(prefix);
            if (header_end + data_bytes >= header_end) parse_and_check(prefix, header_end + data_bytes);
        }
        parse_and_check(prefix.substr(0, n / 2), n);  // the caller read too few bytes
    }
    return 0;
}
