// TraceReader's shared loop (blank lines, header, bad-row accounting, monotonic arrivals) and
// format detection / dispatch.
#include "hotpass/traffic/trace_reader.h"

#include <nlohmann/json.hpp>

#include "hotpass/traffic/azure_reader.h"
#include "hotpass/traffic/burstgpt_reader.h"
#include "hotpass/traffic/field_parse.h"
#include "hotpass/traffic/mooncake_reader.h"
#include "hotpass/traffic/request_log_reader.h"

namespace hp::traffic {

std::string_view format_name(TraceFormat format) {
    switch (format) {
        case TraceFormat::azure:
            return "azure";
        case TraceFormat::mooncake:
            return "mooncake";
        case TraceFormat::burstgpt:
            return "burstgpt";
        case TraceFormat::request_log:
            return "hotpass";
    }
    return "?";
}

std::optional<TraceFormat> format_from_name(std::string_view name) {
    for (TraceFormat format : {TraceFormat::azure, TraceFormat::mooncake, TraceFormat::burstgpt,
                               TraceFormat::request_log})
        if (format_name(format) == name) return format;
    if (name == "request-log") return TraceFormat::request_log;
    return std::nullopt;
}

TraceReader::TraceReader(LineReader lines, ReaderOptions options, TraceFormat format,
                         bool has_header)
    : lines_(std::move(lines)), options_(options), format_(format), header_pending_(has_header) {}

Status TraceReader::record_bad(std::string reason) {
    ++stats_.rows_bad;
    if (options_.strict) return error("{}:{}: {}", path().string(), lines_.line_number(), reason);
    if (stats_.first_bad.size() < options_.max_bad_examples) {
        stats_.first_bad.push_back({lines_.line_number(), std::move(reason)});
    }
    return Status::success();
}

Result<bool> TraceReader::next(Request &request) {
    for (;;) {
        std::string_view line;
        Result<bool> got = lines_.next(line);
        size_t examples_bytes = 0;
        for (const BadRow &bad : stats_.first_bad)
            examples_bytes += sizeof bad + bad.reason.capacity();
        stats_.peak_buffer_bytes =
            std::max(stats_.peak_buffer_bytes, lines_.peak_bytes() + examples_bytes);
        if (!got.ok()) {  // an over-long line: a bad row
            ++stats_.lines;
            HP_TRY(record_bad(got.error()));
            continue;
        }
        if (!*got) return false;
        ++stats_.lines;
        if (trim_spaces(line).empty()) {
            ++stats_.blank_lines;
            continue;
        }
        if (header_pending_) {
            header_pending_ = false;
            Status header = parse_header(line);
            if (!header.ok())
                return error("{}: not a {} trace: {}", path().string(), format_name(format_),
                             header.error());
            continue;
        }
        Result<Request> row = parse_row(line);
        if (!row.ok()) {
            HP_TRY(record_bad(row.error()));
            continue;
        }
        const double arrival_s = row->arrival_s;
        if (first_arrival_s_ && arrival_s < last_arrival_s_) {
            HP_TRY(record_bad(
                fmt::format("timestamp goes backwards ({:.3f} s before the previous row)",
                            last_arrival_s_ - arrival_s)));
            continue;
        }
        if (!first_arrival_s_) first_arrival_s_ = arrival_s;
        last_arrival_s_ = arrival_s;
        request = std::move(*row);
        request.arrival_s = arrival_s - *first_arrival_s_;
        ++stats_.rows_ok;
        return true;
    }
}

Status require_requests(const TraceReader &reader) {
    const ReadStats &stats = reader.stats();
    if (stats.rows_ok > 0) return Status::success();
    if (stats.rows_bad == 0)
        return error("{}: no requests: the file has no data rows", reader.path().string());
    constexpr size_t kQuoted = 3;
    std::string reasons;
    for (size_t i = 0; i < stats.first_bad.size() && i < kQuoted; ++i)
        reasons += fmt::format("{}line {}: {}", i ? "; " : " (first: ", stats.first_bad[i].line,
                               stats.first_bad[i].reason);
    if (!reasons.empty()) reasons += ")";
    return error(
        "{}: no valid request: all {} rows are bad in the {} format{}; if the file is in another "
        "format, name it with --format azure|mooncake|burstgpt|hotpass",
        reader.path().string(), stats.rows_bad, format_name(reader.format()), reasons);
}

Result<TraceFormat> detect_format(const std::filesystem::path &path) {
    Result<LineReader> lines = LineReader::open(path);
    HP_TRY(lines);
    std::string_view line;
    for (;;) {
        Result<bool> got = lines->next(line);
        if (!got.ok())
            return error("cannot detect the format of {}: {}", path.string(), got.error());
        if (!*got) return error("cannot detect the format of {}: no data", path.string());
        line = trim_spaces(line);
        if (!line.empty()) break;
    }
    if (line.front() == '{') {
        const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
        if (row.is_object() && row.contains("input_length")) return TraceFormat::mooncake;
        if (row.is_object() && row.contains("input_tokens")) return TraceFormat::request_log;
        return error(
            "cannot detect the format of {}: first line is JSON but has neither "
            "input_length (Mooncake) nor input_tokens (hotpass request log)",
            path.string());
    }
    if (line.starts_with("TIMESTAMP,ContextTokens,GeneratedTokens")) return TraceFormat::azure;
    if (line.starts_with("Timestamp,Model,Request tokens")) return TraceFormat::burstgpt;
    return error("cannot detect the format of {}: first line is `{:.60}`; use --format",
                 path.string(), line);
}

Result<std::unique_ptr<TraceReader>> open_trace(const std::filesystem::path &path,
                                                std::optional<TraceFormat> format,
                                                const ReaderOptions &options) {
    if (!format) {
        Result<TraceFormat> detected = detect_format(path);
        HP_TRY(detected);
        format = *detected;
    }
    Result<LineReader> lines = LineReader::open(path, options.max_line_bytes);
    HP_TRY(lines);
    switch (*format) {
        case TraceFormat::azure:
            return make_azure_reader(std::move(*lines), options);
        case TraceFormat::mooncake:
            return make_mooncake_reader(std::move(*lines), options);
        case TraceFormat::burstgpt:
            return make_burstgpt_reader(std::move(*lines), options);
        case TraceFormat::request_log:
            return make_request_log_reader(std::move(*lines), options);
    }
    return error("unknown trace format");
}

}  // namespace hp::traffic
