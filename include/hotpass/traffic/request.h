// One LLM request as every trace reader yields it, and hotpass's own request-log line (JSONL).
// Invariant: arrival_s is relative to the first request of its trace and never decreases within
// one stream; lengths are in tokens; empty vectors mean "not known", not "zero".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::traffic {

inline constexpr uint32_t kDefaultBlockTokens = 512;     // Mooncake's prefix-block size
inline constexpr uint32_t kMaxRequestTokens = 1u << 24;  // larger lengths are rejected as garbage

struct Request {
    double arrival_s = 0;  // seconds since the first request of the trace
    uint32_t input_tokens = 0;
    uint32_t output_tokens = 0;
    uint32_t block_tokens = kDefaultBlockTokens;  // tokens per prefix block
    // One hash per block_tokens-sized block of the prompt, chained (a hash names the block and
    // everything before it), so equal leading hashes mean a shared prefix. Empty: unknown.
    std::vector<uint64_t> prefix_hashes;
    std::vector<int32_t> token_ids;  // prompt token ids; empty: unknown
    double ttft_ms = -1;             // measured time to first token; < 0: unknown
    std::vector<float>
        itl_ms;  // measured inter-token latencies, one per output token after the first
    // Tokens routed to each expert while serving this request: [n_layer][n_expert]. Empty: unknown.
    std::vector<std::vector<uint32_t>> expert_tokens;
};

// The request-log JSONL line for `request` (no trailing newline); optional fields only when known.
std::string request_to_jsonl(const Request &request);
// Parses one request-log line; arrival_s is taken as written (not made relative).
Result<Request> request_from_jsonl(std::string_view line);

}  // namespace hp::traffic
