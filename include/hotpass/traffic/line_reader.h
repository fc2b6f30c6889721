// Streams a text file line by line through one fixed-size buffer, so memory stays bounded by the
// buffer plus the longest line, however long the file. Accepts LF and CRLF endings and a missing
// final newline. Memory use is accounted (peak_bytes) so tests can assert the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "hotpass/core/result.h"

namespace hp::traffic {

class LineReader {
  public:
    static constexpr size_t kBufferBytes = 64 * 1024;
    static constexpr size_t kDefaultMaxLineBytes = 16 * 1024 * 1024;

    static Result<LineReader> open(const std::filesystem::path &path,
                                   size_t max_line_bytes = kDefaultMaxLineBytes);

    // The next line without its terminator (and without a trailing '\r'). Returns false at the
    // end of the file. A line longer than max_line_bytes is skipped and reported as an error
    // naming its line number; reading can continue after it.
    Result<bool> next(std::string_view &line);

    uint64_t line_number() const { return line_number_; }  // 1-based number of the last line
    size_t peak_bytes() const { return peak_bytes_; }      // buffer + line capacity, at most
    const std::filesystem::path &path() const { return path_; }

  private:
    struct FileCloser {
        void operator()(std::FILE *file) const { std::fclose(file); }
    };
    bool fill();

    std::filesystem::path path_;
    std::unique_ptr<std::FILE, FileCloser> file_;
    std::unique_ptr<char[]> buffer_;
    size_t buffer_begin_ = 0, buffer_end_ = 0;
    bool eof_ = false;
    std::string line_;
    size_t max_line_bytes_ = kDefaultMaxLineBytes;
    uint64_t line_number_ = 0;
    size_t peak_bytes_ = 0;
};

}  // namespace hp::traffic
