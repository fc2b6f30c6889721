// safetensors reader (read-only mmap) and writer. Validation follows the reference implementation
// (huggingface/safetensors): header length <= 100 MB and inside the file, UTF-8 JSON object, no
// duplicate names, data offsets contiguous from 0 and ending exactly at the end of the file, and
// byte size = product(shape) x dtype size. hotpass also requires each tensor's data to be aligned
// to its element size, which every writer that pads the header to 8 bytes (all of HF's) satisfies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/dtype.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/core/result.h"

namespace hp::model {

constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
    std::string name;
    std::string dtype_name;  // safetensors spelling: "BF16", "F32", "I64", ...
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // byte offsets relative to the start of the data section
    uint64_t end = 0;
};

struct SafetensorsHeader {
    std::vector<SafetensorsEntry> entries;  // in file (offset) order
    std::map<std::string, std::string> metadata;
    uint64_t data_offset = 0;  // 8 + header length
};

// Parses and validates the header of a safetensors file of `file_size` bytes whose first bytes
// are `prefix` (at least the 8-byte length and the header). Errors say what is wrong and where.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view prefix, uint64_t file_size);

// A validated, mapped safetensors file.
struct SafetensorsFile {
    std::shared_ptr<MappedFile> mapping;
    SafetensorsHeader header;

    const uint8_t *data(const SafetensorsEntry &entry) const {
        return mapping->bytes().data() + header.data_offset + entry.begin;
    }
};

Result<SafetensorsFile> open_safetensors(const std::filesystem::path &path);

// One tensor to write: bytes must be product(shape) x dtype size.
struct SafetensorsTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void *data;
};

// Writes tensors in the given order, header padded with spaces to a multiple of 8 bytes (as the
// reference writer does), metadata {"format": "pt"}. Writes to a temporary then renames.
Status write_safetensors(const std::filesystem::path &path, const std::vector<SafetensorsTensor> &tensors);

// Streaming variant for large files: `fill(index, buffer)` produces tensor `index`'s bytes.
struct SafetensorsPlan {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
};
Status write_safetensors_streaming(const std::filesystem::path &path, const std::vector<SafetensorsPlan> &plan,
                                   const std::function<void(size_t index, std::vector<uint8_t> &buffer)> &fill);

}  // namespace hp::model
