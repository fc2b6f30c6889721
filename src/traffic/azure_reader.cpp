// Azure LLM inference trace rows: `2023-11-16 18:17:03.9799600,4808,10`.
#include "hotpass/traffic/azure_reader.h"

#include "hotpass/traffic/field_parse.h"

namespace hp::traffic {
namespace {

class AzureReader final : public TraceReader {
  public:
    AzureReader(LineReader lines, const ReaderOptions &options)
        : TraceReader(std::move(lines), options, TraceFormat::azure, /*has_header=*/true) {}

  private:
    Status parse_header(std::string_view line) override {
        if (trim_spaces(line) != "TIMESTAMP,ContextTokens,GeneratedTokens")
            return error("expected header TIMESTAMP,ContextTokens,GeneratedTokens, got `{:.60}`",
                         line);
        return Status::success();
    }

    Result<Request> parse_row(std::string_view line) override {
        split_csv(line, fields_);
        if (fields_.size() != 3) return error("expected 3 fields, got {}", fields_.size());
        Result<double> arrival_s = parse_datetime_seconds(fields_[0]);
        HP_TRY(arrival_s);
        Result<uint32_t> input = parse_token_count(fields_[1], "ContextTokens");
        HP_TRY(input);
        Result<uint32_t> output = parse_token_count(fields_[2], "GeneratedTokens");
        HP_TRY(output);
        if (*input == 0) return error("ContextTokens is 0");
        Request request;
        request.arrival_s = *arrival_s;
        request.input_tokens = *input;
        request.output_tokens = *output;
        return request;
    }

    std::vector<std::string_view> fields_;
};

}  // namespace

std::unique_ptr<TraceReader> make_azure_reader(LineReader lines, const ReaderOptions &options) {
    return std::make_unique<AzureReader>(std::move(lines), options);
}

}  // namespace hp::traffic
