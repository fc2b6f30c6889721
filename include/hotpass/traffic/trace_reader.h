// The trace-reader interface: a stream of Requests from a file in one of the supported formats,
// with bad rows counted (and the first few kept with their line numbers) instead of dropped
// silently or crashing. Strategies: azure_reader, mooncake_reader, burstgpt_reader,
// request_log_reader. Invariant: yielded arrivals never decrease; a row whose timestamp goes
// backwards is a bad row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/line_reader.h"
#include "hotpass/traffic/request.h"

namespace hp::traffic {

enum class TraceFormat { azure, mooncake, burstgpt, request_log };

std::string_view format_name(TraceFormat format);  // "azure", "mooncake", "burstgpt", "hotpass"
std::optional<TraceFormat> format_from_name(std::string_view name);

struct BadRow {
    uint64_t line = 0;  // 1-based line number in the file
    std::string reason;
};

struct ReadStats {
    uint64_t lines = 0;             // lines seen, header and blank lines included
    uint64_t rows_ok = 0;           // requests yielded
    uint64_t rows_bad = 0;          // rows skipped as bad
    uint64_t blank_lines = 0;       // empty or whitespace-only lines, skipped
    std::vector<BadRow> first_bad;  // the first ReaderOptions::max_bad_examples bad rows
    size_t peak_buffer_bytes = 0;   // the reader's own memory: line buffer + examples
};

struct ReaderOptions {
    bool strict = false;  // the first bad row is an error
    size_t max_bad_examples = 10;
    size_t max_line_bytes = LineReader::kDefaultMaxLineBytes;
};

class TraceReader {
  public:
    virtual ~TraceReader() = default;

    // The next good request (false at the end). Bad rows are counted and skipped; with
    // options.strict the first one is returned as an error naming its line.
    Result<bool> next(Request &request);

    const ReadStats &stats() const { return stats_; }
    TraceFormat format() const { return format_; }
    const std::filesystem::path &path() const { return lines_.path(); }

  protected:
    TraceReader(LineReader lines, ReaderOptions options, TraceFormat format, bool has_header);
    // Checks the header line of a CSV format; an error means the file is not in this format.
    virtual Status parse_header(std::string_view line) { return Status::success(); }
    // Parses one data row. arrival_s is absolute in the format's clock (seconds); an error is a
    // bad row with that reason.
    virtual Result<Request> parse_row(std::string_view line) = 0;

  private:
    Status record_bad(std::string reason);

    LineReader lines_;
    ReaderOptions options_;
    TraceFormat format_;
    bool header_pending_;
    ReadStats stats_;
    std::optional<double> first_arrival_s_;
    double last_arrival_s_ = 0;
};

// After the last row: an error when the reader yielded no request — every row was bad (often a
// file read in the wrong format) or there was none. It counts the bad rows, quotes the first
// reasons and suggests --format.
Status require_requests(const TraceReader &reader);

// Guesses the format from the first non-blank line: a JSON object with "input_length" is Mooncake,
// with "input_tokens" the hotpass request log; a CSV header names Azure or BurstGPT.
Result<TraceFormat> detect_format(const std::filesystem::path &path);

// Opens `path` in `format`, or in the detected format when none is given.
Result<std::unique_ptr<TraceReader>> open_trace(const std::filesystem::path &path,
                                                std::optional<TraceFormat> format = std::nullopt,
                                                const ReaderOptions &options = {});

}  // namespace hp::traffic
