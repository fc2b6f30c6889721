// Mooncake rows: {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids":
// [...]}. The number of hash ids must be ceil(input_length / 512).
#include "hotpass/traffic/mooncake_reader.h"

#include <nlohmann/json.hpp>

namespace hp::traffic {
namespace {

Result<uint32_t> token_count(const nlohmann::json &row, const char *name) {
    auto field = row.find(name);
    if (field == row.end()) return error("{} is missing", name);
    if (field->is_number_integer() && field->get<int64_t>() < 0)
        return error("{} is negative ({})", name, field->get<int64_t>());
    if (!field->is_number_unsigned()) return error("{} is not an integer", name);
    const uint64_t value = field->get<uint64_t>();
    if (value >= kMaxRequestTokens) return error("{} is implausibly large ({})", name, value);
    return uint32_t(value);
}

class MooncakeReader final : public TraceReader {
  public:
    MooncakeReader(LineReader lines, const ReaderOptions &options)
        : TraceReader(std::move(lines), options, TraceFormat::mooncake, /*has_header=*/false) {}

  private:
    Result<Request> parse_row(std::string_view line) override {
        const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!row.is_object()) return error("not a JSON object");
        auto timestamp = row.find("timestamp");
        if (timestamp == row.end()) return error("timestamp is missing");
        if (!timestamp->is_number()) return error("timestamp is not a number");
        Result<uint32_t> input = token_count(row, "input_length");
        HP_TRY(input);
        Result<uint32_t> output = token_count(row, "output_length");
        HP_TRY(output);
        if (*input == 0) return error("input_length is 0");
        Request request;
        request.arrival_s = timestamp->get<double>() / 1000.0;
        request.input_tokens = *input;
        request.output_tokens = *output;
        request.block_tokens = kDefaultBlockTokens;
        auto hashes = row.find("hash_ids");
        if (hashes != row.end()) {
            if (!hashes->is_array()) return error("hash_ids is not an array");
            request.prefix_hashes.reserve(hashes->size());
            for (const nlohmann::json &hash : *hashes) {
                if (!hash.is_number_unsigned()) return error("hash_ids holds a non-integer");
                request.prefix_hashes.push_back(hash.get<uint64_t>());
            }
            const size_t expected = (*input + kDefaultBlockTokens - 1) / kDefaultBlockTokens;
            if (request.prefix_hashes.size() != expected)
                return error("{} hash_ids for input_length {} (expected {})",
                             request.prefix_hashes.size(), *input, expected);
        }
        return request;
    }
};

}  // namespace

std::unique_ptr<TraceReader> make_mooncake_reader(LineReader lines, const ReaderOptions &options) {
    return std::make_unique<MooncakeReader>(std::move(lines), options);
}

}  // namespace hp::traffic
