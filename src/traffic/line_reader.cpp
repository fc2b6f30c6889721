// LineReader: one fixed buffer refilled with fread; a line is copied out only when it straddles
// two fills, so the common case returns a view into the buffer.
#include "hotpass/traffic/line_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hp::traffic {

Result<LineReader> LineReader::open(const std::filesystem::path &path, size_t max_line_bytes) {
    std::FILE *file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) return error("cannot open {}: {}", path.string(), std::strerror(errno));
    LineReader reader;
    reader.path_ = path;
    reader.file_.reset(file);
    reader.buffer_ = std::make_unique<char[]>(kBufferBytes);
    reader.max_line_bytes_ = max_line_bytes;
    reader.peak_bytes_ = kBufferBytes;
    return reader;
}

bool LineReader::fill() {
    if (eof_) return false;
    const size_t got = std::fread(buffer_.get(), 1, kBufferBytes, file_.get());
    buffer_begin_ = 0;
    buffer_end_ = got;
    if (got < kBufferBytes) eof_ = true;
    return got > 0;
}

Result<bool> LineReader::next(std::string_view &line) {
    line_.clear();
    bool spilled = false, too_long = false, any = false;
    for (;;) {
        if (buffer_begin_ == buffer_end_ && !fill()) {
            if (!any) return false;
            if (!too_long) line = line_;  // last line without a final newline
            break;
        }
        any = true;
        const char *begin = buffer_.get() + buffer_begin_;
        const size_t available = buffer_end_ - buffer_begin_;
        const char *newline = static_cast<const char *>(std::memchr(begin, '\n', available));
        const size_t take = newline ? size_t(newline - begin) : available;
        if (newline && !spilled && !too_long && take <= max_line_bytes_) {
            line = std::string_view(begin, take);
            buffer_begin_ += take + 1;
            break;
        }
        if (!too_long) {
            if (line_.size() + take > max_line_bytes_) {
                too_long = true;
                line_.clear();
                line_.shrink_to_fit();
            } else {
                line_.append(begin, take);
                spilled = true;
                peak_bytes_ = std::max(peak_bytes_, kBufferBytes + line_.capacity());
            }
        }
        buffer_begin_ += take + (newline ? 1 : 0);
        if (newline) {
            if (!too_long) line = line_;
            break;
        }
    }
    ++line_number_;
    if (too_long) return error("line {} is longer than {} bytes", line_number_, max_line_bytes_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
}

}  // namespace hp::traffic
