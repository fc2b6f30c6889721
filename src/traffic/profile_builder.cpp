// One pass over the requests; every accumulator is O(1) per request except the prefix cache
// (O(blocks)) and the simulation (O(steps x batch)).
#include "hotpass/traffic/profile_builder.h"

#include <algorithm>
#include <cmath>

#include "hotpass/core/hash.h"

namespace hp::traffic {

Status check_profile_options(const ProfileOptions &options) {
    HP_TRY(check_engine_limits(options.limits));
    return check_cost_model(options.cost);
}

ProfileBuilder::ProfileBuilder(const ProfileOptions &options)
    : options_(options), prefix_cache_(options.prefix_cache_blocks), rng_state_(options.seed) {
    prefix_.capacity_blocks = options.prefix_cache_blocks;
    if (options.simulate) simulator_.emplace(options.limits, options.cost, options.seed);
}

void ProfileBuilder::add(const Request &request) {
    if (requests_ == 0) {
        first_arrival_s_ = request.arrival_s;
    } else {
        const double gap_s = std::max(0.0, request.arrival_s - last_arrival_s_);
        const double delta = gap_s - gap_mean_;
        gap_mean_ += delta / double(requests_);  // requests_ - 1 gaps before this one, +1
        gap_m2_ += delta * (gap_s - gap_mean_);
    }
    last_arrival_s_ = request.arrival_s;
    const int64_t second = int64_t(std::floor(request.arrival_s));
    current_second_requests_ = second == current_second_ ? current_second_requests_ + 1 : 1;
    current_second_ = second;
    peak_requests_1s_ = std::max(peak_requests_1s_, current_second_requests_);
    ++requests_;

    input_tokens_.add(request.input_tokens);
    output_tokens_.add(request.output_tokens);

    uint32_t cached_tokens = 0;
    if (!request.prefix_hashes.empty()) {
        prefix_.known = true;
        ++prefix_.requests;
        const uint32_t hits = prefix_cache_.lookup_and_insert(request.prefix_hashes);
        prefix_.blocks += request.prefix_hashes.size();
        prefix_.hit_blocks += hits;
        cached_tokens = uint32_t(
            std::min<uint64_t>(uint64_t(hits) * request.block_tokens, request.input_tokens));
    }
    if (simulator_)
        simulator_->arrive(request.arrival_s, request.input_tokens, request.output_tokens,
                           cached_tokens);
    if (!request.expert_tokens.empty()) expert_load_.add(request.expert_tokens);

    const uint64_t index = requests_ - 1;
    if (samples_.size() < options_.sample_requests) {
        samples_.emplace_back(index, request);
    } else if (options_.sample_requests > 0) {
        rng_state_ = splitmix64(rng_state_ ^ index);
        const uint64_t slot = rng_state_ % requests_;
        if (slot < samples_.size()) samples_[slot] = {index, request};
    }
}

Profile ProfileBuilder::finish(std::string source, std::string format) {
    Profile profile;
    profile.source = std::move(source);
    profile.format = std::move(format);
    profile.requests = requests_;
    profile.arrivals.start_s = requests_ ? first_arrival_s_ : 0;
    profile.arrivals.end_s = requests_ ? last_arrival_s_ : 0;
    const double span_s = last_arrival_s_ - first_arrival_s_;
    if (requests_ >= 2 && span_s > 0) {
        profile.arrivals.rate_rps = double(requests_ - 1) / span_s;
        const double gap_std = std::sqrt(gap_m2_ / double(requests_ - 1));
        profile.arrivals.interarrival_cv = gap_mean_ > 0 ? gap_std / gap_mean_ : 0;
    }
    profile.arrivals.peak_requests_1s = peak_requests_1s_;
    profile.input_tokens = input_tokens_.summarize();
    profile.output_tokens = output_tokens_.summarize();
    profile.prefix = prefix_;
    profile.prefix.reuse = prefix_.blocks ? double(prefix_.hit_blocks) / double(prefix_.blocks) : 0;
    if (simulator_) profile.batching = simulator_->finish();
    profile.batching.limits = options_.limits;
    profile.batching.cost = options_.cost;
    profile.expert_load = expert_load_.summarize();
    std::sort(samples_.begin(), samples_.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto &[index, request] : samples_) profile.sample_requests.push_back(std::move(request));
    samples_.clear();
    return profile;
}

size_t ProfileBuilder::memory_bytes() const {
    size_t samples_bytes = 0;
    for (const auto &[index, request] : samples_)
        samples_bytes += sizeof request + request.prefix_hashes.capacity() * sizeof(uint64_t) +
                         request.token_ids.capacity() * sizeof(int32_t);
    return input_tokens_.memory_bytes() + output_tokens_.memory_bytes() +
           prefix_cache_.memory_bytes() + samples_bytes;
}

Result<TraceProfile> profile_trace(const std::filesystem::path &path,
                                   std::optional<TraceFormat> format,
                                   const ReaderOptions &reader_options,
                                   const ProfileOptions &profile_options) {
    HP_TRY(check_profile_options(profile_options));
    Result<std::unique_ptr<TraceReader>> reader = open_trace(path, format, reader_options);
    HP_TRY(reader);
    ProfileBuilder builder(profile_options);
    Request request;
    for (;;) {
        Result<bool> got = (*reader)->next(request);
        HP_TRY(got);
        if (!*got) break;
        builder.add(request);
    }
    HP_TRY(require_requests(**reader));
    TraceProfile result{
        builder.finish(path.string(), std::string(format_name((*reader)->format()))),
        (*reader)->stats()};
    result.profile.bad_rows = result.stats.rows_bad;
    return result;
}

Profile profile_requests(const std::vector<Request> &requests, const ProfileOptions &options,
                         std::string source, std::string format) {
    ProfileBuilder builder(options);
    for (const Request &request : requests) builder.add(request);
    return builder.finish(std::move(source), std::move(format));
}

}  // namespace hp::traffic
