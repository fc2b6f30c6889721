// safetensors: parse + validate headers, map files read-only, write files.
#include "hotpass/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

#include "hotpass/core/json_text.h"

namespace hp::model {
namespace {

using nlohmann::json;

// Element sizes of every dtype the safetensors format defines (so that byte counts of tensors
// hotpass does not compute with are still validated).
std::optional<uint64_t> safetensors_dtype_size(std::string_view name) {
    static const std::pair<std::string_view, uint64_t> sizes[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},  {"U16", 2},
        {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8},  {"I64", 8},
        {"U64", 8}};
    for (const auto &[dtype, size] : sizes) {
        if (dtype == name) return size;
    }
    return std::nullopt;
}

bool is_valid_utf8(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
        const auto byte = uint8_t(text[i]);
        size_t extra = 0;
        uint32_t code = 0;
        if (byte < 0x80) { ++i; continue; }
        if ((byte & 0xe0) == 0xc0) { extra = 1; code = byte & 0x1f; }
        else if ((byte & 0xf0) == 0xe0) { extra = 2; code = byte & 0x0f; }
        else if ((byte & 0xf8) == 0xf0) { extra = 3; code = byte & 0x07; }
        else return false;
        if (i + extra >= text.size()) return false;
        for (size_t k = 1; k <= extra; ++k) {
            const auto next = uint8_t(text[i + k]);
            if ((next & 0xc0) != 0x80) return false;
            code = (code << 6) | (next & 0x3f);
        }
        if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) || (extra == 3 && code < 0x10000) ||
            code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
            return false;
        }
        i += extra + 1;
    }
    return true;
}

Result<SafetensorsEntry> parse_entry(const std::string &name, const json &info) {
    if (!info.is_object()) return error("tensor '{}': header entry must be an object", name);
    for (const char *key : {"dtype", "shape", "data_offsets"}) {
        if (!info.contains(key)) return error("tensor '{}': header entry has no '{}'", name, key);
    }
    SafetensorsEntry entry;
    entry.name = name;
    if (!info["dtype"].is_string()) return error("tensor '{}': dtype must be a string", name);
    entry.dtype_name = info["dtype"].get<std::string>();
    const auto element_size = safetensors_dtype_size(entry.dtype_name);
    if (!element_size) return error("tensor '{}': unknown dtype '{}'", name, entry.dtype_name);

    if (!info["shape"].is_array()) return error("tensor '{}': shape must be a list", name);
    uint64_t n_element = 1;
    for (const json &dim : info["shape"]) {
        if (!dim.is_number_unsigned()) return error("tensor '{}': shape must hold non-negative integers, got {}", name, json_summary(info["shape"]));
        const uint64_t extent = dim.get<uint64_t>();
        if (extent > (uint64_t(1) << 40) || (extent != 0 && n_element > (uint64_t(1) << 59) / extent)) {  // x 8-byte elements < 2^62
            return error("tensor '{}': shape {} overflows", name, json_summary(info["shape"]));
        }
        n_element *= extent;
        entry.shape.push_back(int64_t(extent));
    }
    const json &offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
        return error("tensor '{}': data_offsets must be [begin, end], got {}", name, json_summary(offsets));
    }
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    if (entry.end < entry.begin) return error("tensor '{}': data_offsets [{}, {}] end before begin", name, entry.begin, entry.end);
    const uint64_t n_byte = n_element * *element_size;
    if (entry.end - entry.begin != n_byte) {
        return error("tensor '{}': {} with shape {} needs {} bytes but data_offsets [{}, {}] hold {}", name,
                     entry.dtype_name, info["shape"].dump(), n_byte, entry.begin, entry.end, entry.end - entry.begin);
    }
    return entry;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::string_view prefix, uint64_t file_size) {
    if (file_size < 8 || prefix.size() < 8) return error("file too small for a safetensors header ({} bytes)", file_size);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | uint8_t(prefix[size_t(i)]);
    if (header_bytes > kSafetensorsMaxHeaderBytes) {
        return error("header length {} exceeds the 100 MB limit", header_bytes);
    }
    if (header_bytes > file_size - 8) {
        return error("header length {} runs past the end of the file ({} bytes)", header_bytes, file_size);
    }
    if (prefix.size() < 8 + header_bytes) return error("header truncated: {} of {} bytes", prefix.size() - 8, header_bytes);
    const std::string_view text = prefix.substr(8, header_bytes);
    if (!is_valid_utf8(text)) return error("header is not valid UTF-8");
    if (text.empty() || text.front() != '{') return error("header does not start with '{{'");

    // Duplicate names are an error in the reference implementation; nlohmann keeps the last one
    // silently, so detect them while parsing.
    std::set<std::string> seen_names;
    std::string duplicate;
    auto on_event = [&](int depth, json::parse_event_t event, json &parsed) {
        if (event == json::parse_event_t::key && depth == 1) {
            const std::string key = parsed.get<std::string>();
            if (!seen_names.insert(key).second && duplicate.empty()) duplicate = key;
        }
        return true;
    };
    json root = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
    if (root.is_discarded()) return error("header is not valid JSON");
    if (!root.is_object()) return error("header is not a JSON object");
    if (!duplicate.empty()) return error("tensor '{}' appears twice in the header", duplicate);

    SafetensorsHeader header;
    header.data_offset = 8 + header_bytes;
    for (auto item = root.begin(); item != root.end(); ++item) {
        if (item.key() == "__metadata__") {
            if (!item.value().is_object()) return error("__metadata__ must be an object of strings");
            for (auto meta = item.value().begin(); meta != item.value().end(); ++meta) {
                if (!meta.value().is_string()) return error("__metadata__['{}'] must be a string", meta.key());
                header.metadata[meta.key()] = meta.value().get<std::string>();
            }
            continue;
        }
        auto entry = parse_entry(item.key(), item.value());
        if (!entry.ok()) return Error{entry.error()};
        header.entries.push_back(std::move(entry).value());
    }
    std::sort(header.entries.begin(), header.entries.end(),
              [](const SafetensorsEntry &a, const SafetensorsEntry &b) {
                  return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
              });
    uint64_t expected_begin = 0;
    for (const SafetensorsEntry &entry : header.entries) {
        if (entry.begin != expected_begin) {
            return error("tensor '{}': data_offsets begin at {} but the previous tensor ends at {} ({})", entry.name,
                         entry.begin, expected_begin, entry.begin < expected_begin ? "overlap" : "gap");
        }
        expected_begin = entry.end;
        const uint64_t element_size = *safetensors_dtype_size(entry.dtype_name);
        if ((header.data_offset + entry.begin) % element_size != 0) {
            return error("tensor '{}': data at file offset {} is not aligned to its {}-byte elements", entry.name,
                         header.data_offset + entry.begin, element_size);
        }
    }
    const uint64_t data_bytes = file_size - header.data_offset;
    if (expected_begin != data_bytes) {
        return error("tensor data ends at byte {} but the file holds {} data bytes", expected_begin, data_bytes);
    }
    return header;
}

Result<SafetensorsFile> open_safetensors(const std::filesystem::path &path) {
    auto mapping = MappedFile::open(path);
    if (!mapping.ok()) return Error{mapping.error()};
    const auto bytes = (*mapping)->bytes();
    const std::string_view view(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    auto header = parse_safetensors_header(view, bytes.size());
    if (!header.ok()) return error("{}: {}", path.string(), header.error());
    return SafetensorsFile{std::move(mapping).value(), std::move(header).value()};
}

namespace {

std::string header_text(const std::vector<SafetensorsPlan> &plan) {
    // Build the JSON by hand to keep the tensors in plan order (nlohmann sorts object keys).
    std::string text = R"({"__metadata__":{"format":"pt"})";
    uint64_t offset = 0;
    for (const SafetensorsPlan &tensor : plan) {
        uint64_t n_element = 1;
        std::string shape;
        for (int64_t extent : tensor.shape) {
            n_element *= uint64_t(extent);
            shape += fmt::format("{}{}", shape.empty() ? "" : ",", extent);
        }
        const uint64_t n_byte = n_element * dtype_size(tensor.dtype);
        text += fmt::format(R"(,{}:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})", json(tensor.name).dump(),
                            dtype_name(tensor.dtype), shape, offset, offset + n_byte);
        offset += n_byte;
    }
    text += "}";
    while ((8 + text.size()) % 8 != 0) text += ' ';
    return text;
}

}  // namespace

Status write_safetensors_streaming(const std::filesystem::path &path, const std::vector<SafetensorsPlan> &plan,
                                   const std::function<void(size_t, std::vector<uint8_t> &)> &fill) {
    const std::filesystem::path temporary = path.string() + ".tmp";
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return error("cannot create {}: {}", temporary.string(), std::strerror(errno));
    const std::string header = header_text(plan);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    out.write(reinterpret_cast<const char *>(length), 8);
    out.write(header.data(), std::streamsize(header.size()));
    std::vector<uint8_t> buffer;
    for (size_t index = 0; index < plan.size(); ++index) {
        uint64_t n_byte = dtype_size(plan[index].dtype);
        for (int64_t extent : plan[index].shape) n_byte *= uint64_t(extent);
        buffer.resize(n_byte);
        fill(index, buffer);
        HP_CHECK(buffer.size() == n_byte, "fill() changed the size of tensor {}", plan[index].name);
        out.write(reinterpret_cast<const char *>(buffer.data()), std::streamsize(buffer.size()));
    }
    out.flush();
    if (!out) return error("cannot write {}: {}", temporary.string(), std::strerror(errno));
    out.close();
    std::error_code code;
    std::filesystem::rename(temporary, path, code);
    if (code) return error("cannot rename {} to {}: {}", temporary.string(), path.string(), code.message());
    return Status::success();
}

Status write_safetensors(const std::filesystem::path &path, const std::vector<SafetensorsTensor> &tensors) {
    std::vector<SafetensorsPlan> plan;
    for (const SafetensorsTensor &tensor : tensors) plan.push_back({tensor.name, tensor.dtype, tensor.shape});
    return write_safetensors_streaming(path, plan, [&](size_t index, std::vector<uint8_t> &buffer) {
        std::memcpy(buffer.data(), tensors[index].data, buffer.size());
    });
}

}  // namespace hp::model
