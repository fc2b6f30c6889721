// hotpass request-log rows; the parsing itself is request_from_jsonl (request.cpp).
#include "hotpass/traffic/request_log_reader.h"

namespace hp::traffic {
namespace {

class RequestLogReader final : public TraceReader {
  public:
    RequestLogReader(LineReader lines, const ReaderOptions &options)
        : TraceReader(std::move(lines), options, TraceFormat::request_log, /*has_header=*/false) {}

  private:
    Result<Request> parse_row(std::string_view line) override { return request_from_jsonl(line); }
};

}  // namespace

std::unique_ptr<TraceReader> make_request_log_reader(LineReader lines,
                                                     const ReaderOptions &options) {
    return std::make_unique<RequestLogReader>(std::move(lines), options);
}

}  // namespace hp::traffic
