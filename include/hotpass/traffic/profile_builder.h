// Builds a Profile from a stream of requests in one pass with bounded memory: exact length counts
// (bounded by distinct lengths), running moments of inter-arrival gaps, an LRU prefix cache of
// bounded capacity, the batching simulation and a fixed-size reservoir of sample requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/traffic/batch_sim.h"
#include "hotpass/traffic/expert_load.h"
#include "hotpass/traffic/prefix_cache.h"
#include "hotpass/traffic/profile.h"
#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

struct ProfileOptions {
    EngineLimits limits;
    StepCostModel cost;
    bool simulate = true;                       // run the batching simulation
    uint64_t prefix_cache_blocks = 1ull << 22;  // 4M blocks = 2G tokens at 512 tokens per block
    uint32_t sample_requests = 32;              // size of the replay sample
    uint64_t seed = 0;                          // for the reservoirs
};

// An error naming the first engine limit or cost-model coefficient no simulation can run on
// (batch_shape.h); checked whether or not options.simulate, since the Profile records them.
Status check_profile_options(const ProfileOptions &options);

class ProfileBuilder {
  public:
    // With options.simulate, options must pass check_profile_options (the simulator stops the
    // process otherwise).
    explicit ProfileBuilder(const ProfileOptions &options = {});

    // Requests must come in non-decreasing arrival_s.
    void add(const Request &request);
    Profile finish(std::string source, std::string format);
    size_t memory_bytes() const;  // the builder's own accounting of its growing state

  private:
    ProfileOptions options_;
    uint64_t requests_ = 0;
    double first_arrival_s_ = 0, last_arrival_s_ = 0;
    double gap_mean_ = 0, gap_m2_ = 0;  // Welford moments of inter-arrival gaps
    int64_t current_second_ = -1;
    uint64_t current_second_requests_ = 0, peak_requests_1s_ = 0;
    ValueCounter input_tokens_, output_tokens_;
    PrefixCache prefix_cache_;
    PrefixReuse prefix_;
    std::optional<BatchSimulator> simulator_;
    ExpertLoadCounter expert_load_;
    std::vector<std::pair<uint64_t, Request>> samples_;  // (arrival index, request)
    uint64_t rng_state_;
};

struct TraceProfile {
    Profile profile;
    ReadStats stats;
};

// Reads a whole trace (streaming) and profiles it. Errors: options that fail
// check_profile_options, unreadable file, unknown format, a bad row under options.strict, or no
// valid request at all (require_requests).
Result<TraceProfile> profile_trace(const std::filesystem::path &path,
                                   std::optional<TraceFormat> format = std::nullopt,
                                   const ReaderOptions &reader_options = {},
                                   const ProfileOptions &profile_options = {});

Profile profile_requests(const std::vector<Request> &requests, const ProfileOptions &options,
                         std::string source, std::string format = "synthetic");

}  // namespace hp::traffic
