// BurstGPT rows: `5,ChatGPT,472,18,490,Conversation log`. Response tokens may be 0 (a failed
// request); Total tokens must equal Request + Response tokens.
#include "hotpass/traffic/burstgpt_reader.h"

#include "hotpass/traffic/field_parse.h"

namespace hp::traffic {
namespace {

class BurstGptReader final : public TraceReader {
  public:
    BurstGptReader(LineReader lines, const ReaderOptions &options)
        : TraceReader(std::move(lines), options, TraceFormat::burstgpt, /*has_header=*/true) {}

  private:
    Status parse_header(std::string_view line) override {
        split_csv(line, fields_);
        if (fields_.size() < 4 || trim_spaces(fields_[0]) != "Timestamp" ||
            trim_spaces(fields_[2]) != "Request tokens" ||
            trim_spaces(fields_[3]) != "Response tokens")
            return error(
                "expected header Timestamp,Model,Request tokens,Response tokens,..., got `{:.60}`",
                line);
        n_fields_ = fields_.size();
        return Status::success();
    }

    Result<Request> parse_row(std::string_view line) override {
        split_csv(line, fields_);
        if (fields_.size() != n_fields_)
            return error("expected {} fields, got {}", n_fields_, fields_.size());
        Result<double> arrival_s = parse_seconds(fields_[0], "Timestamp");
        HP_TRY(arrival_s);
        Result<uint32_t> input = parse_token_count(fields_[2], "Request tokens");
        HP_TRY(input);
        Result<uint32_t> output = parse_token_count(fields_[3], "Response tokens");
        HP_TRY(output);
        if (*input == 0) return error("Request tokens is 0");
        if (n_fields_ >= 5) {
            Result<uint32_t> total = parse_token_count(fields_[4], "Total tokens");
            HP_TRY(total);
            if (*total != *input + *output)
                return error("Total tokens {} != Request + Response tokens {}", *total,
                             *input + *output);
        }
        Request request;
        request.arrival_s = *arrival_s;
        request.input_tokens = *input;
        request.output_tokens = *output;
        return request;
    }

    std::vector<std::string_view> fields_;
    size_t n_fields_ = 6;
};

}  // namespace

std::unique_ptr<TraceReader> make_burstgpt_reader(LineReader lines, const ReaderOptions &options) {
    return std::make_unique<BurstGptReader>(std::move(lines), options);
}

}  // namespace hp::traffic
