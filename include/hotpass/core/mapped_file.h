// A read-only memory mapping of a whole file. Weights are served from such mappings so that a
// restarted process finds them in the page cache and nothing can write through them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <span>

#include "hotpass/core/result.h"

namespace hp {

class MappedFile {
public:
    static Result<std::shared_ptr<MappedFile>> open(const std::filesystem::path &path);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const std::filesystem::path &path() const { return path_; }

private:
    MappedFile() = default;
    std::filesystem::path path_;
    const uint8_t *data_ = nullptr;
    size_t size_ = 0;
};

// Reads a whole (small) file into a string.
Result<std::string> read_text_file(const std::filesystem::path &path);
// Writes a file atomically: to a temporary beside it, then rename. On any failure `path` is left
// as it was and the temporary is removed.
Status write_file_atomic(const std::filesystem::path &path, std::string_view contents);
// The same for contents that `write` streams (a file too large to hold as one string); an error
// from `write` is returned as is.
Status write_file_atomic(const std::filesystem::path &path, const std::function<Status(std::ostream &)> &write);

}  // namespace hp
