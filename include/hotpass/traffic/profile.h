// Profile: the plain-data summary of a window of traffic (DESIGN.md §8) — arrivals and their
// burstiness, input/output length distributions, prefix reuse, what continuous batching would
// make of it (batch_sim.h), MoE expert load when known, and a few sampled requests to replay.
// Stored as JSON (profile_json.h); built by ProfileBuilder (profile_builder.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpass/traffic/batch_sim.h"
#include "hotpass/traffic/distribution.h"
#include "hotpass/traffic/expert_load.h"
#include "hotpass/traffic/request.h"

namespace hp::traffic {

struct ArrivalStats {
    double start_s = 0, end_s = 0;  // first and last arrival, trace-relative seconds
    double rate_rps = 0;            // requests / (end_s - start_s); 0 for fewer than two requests
    double interarrival_cv = 0;     // std / mean of gaps; 1 for Poisson arrivals, > 1 bursty
    uint64_t peak_requests_1s = 0;  // most arrivals in one aligned 1-second bucket
};

struct PrefixReuse {
    bool known = false;       // at least one request carried prefix hashes
    uint64_t requests = 0;    // requests with prefix hashes
    uint64_t blocks = 0;      // prompt blocks seen
    uint64_t hit_blocks = 0;  // leading blocks an (LRU, capacity_blocks) prefix cache held
    uint64_t capacity_blocks = 0;
    double reuse = 0;  // hit_blocks / blocks
};

struct Profile {
    std::string source;  // file or generator the window came from
    std::string format;  // format_name() of the source, or "synthetic"
    uint64_t requests = 0;
    uint64_t bad_rows = 0;
    ArrivalStats arrivals;
    Distribution input_tokens, output_tokens;
    PrefixReuse prefix;
    BatchingSummary batching;              // batching.simulated == false when not simulated
    ExpertLoad expert_load;                // empty layers: not supplied
    std::vector<Request> sample_requests;  // a uniform reservoir sample, in arrival order
};

}  // namespace hp::traffic
