// The synthetic-traffic generator (model in synth.h; presets in synth_presets.cpp).
#include "hotpass/traffic/synth.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

#include "hotpass/core/hash.h"

namespace hp::traffic {
namespace {

constexpr size_t kPromptPool = 64;  // recent prompts a follow-up can extend

uint32_t sample_length(const std::vector<QuantileKnot> &knots, double u, double scale) {
    size_t upper = 1;
    while (upper + 1 < knots.size() && knots[upper].p < u) ++upper;
    const QuantileKnot &a = knots[upper - 1], &b = knots[upper];
    const double t = b.p > a.p ? std::clamp((u - a.p) / (b.p - a.p), 0.0, 1.0) : 0.0;
    const double log_tokens = std::log(double(std::max<uint32_t>(a.tokens, 1))) * (1 - t) +
                              std::log(double(std::max<uint32_t>(b.tokens, 1))) * t;
    const double tokens = std::round(std::exp(log_tokens) * scale);
    return uint32_t(std::clamp(tokens, 1.0, double(kMaxRequestTokens - 1)));
}

class Generator {
  public:
    explicit Generator(uint64_t seed) : rng_(seed), hash_key_(splitmix64(seed ^ 0x5eed)) {}

    double gap_s(const SynthPreset &preset, double rate_rps) {
        const double cv = std::clamp(preset.interarrival_cv, 0.25, 4.0);
        const double shape = 1 / (cv * cv);
        std::gamma_distribution<double> gap(shape, 1 / (rate_rps * shape));
        return gap(rng_);
    }

    Request request(const SynthPreset &preset, double arrival_s, double input_scale) {
        Request request;
        request.arrival_s = arrival_s;
        request.input_tokens = sample_length(preset.input_tokens, uniform_(rng_), input_scale);
        request.output_tokens = sample_length(preset.output_tokens, uniform_(rng_), 1.0);
        if (preset.prefix_hashes)
            request.prefix_hashes = prompt_blocks(preset, request.input_tokens);
        return request;
    }

  private:
    std::vector<uint64_t> prompt_blocks(const SynthPreset &preset, uint32_t input_tokens) {
        const size_t n_blocks = (input_tokens + kDefaultBlockTokens - 1) / kDefaultBlockTokens;
        std::vector<uint64_t> blocks;
        size_t slot = pool_.size() < kPromptPool ? pool_.size() : next_slot_++ % kPromptPool;
        if (uniform_(rng_) < preset.follow_up_share) {
            size_t best = pool_.size();  // the longest pooled prompt shorter than this one
            for (size_t i = 0; i < pool_.size(); ++i)
                if (pool_[i].size() < n_blocks &&
                    (best == pool_.size() || pool_[i].size() > pool_[best].size()))
                    best = i;
            if (best < pool_.size()) {
                blocks = pool_[best];
                slot = best;  // the conversation moves on: its longer prompt replaces the old one
            }
        }
        if (blocks.empty() && n_blocks > preset.system_prompt_blocks)
            for (uint32_t i = 0; i < preset.system_prompt_blocks; ++i)
                blocks.push_back(splitmix64(hash_key_ ^ (0x5157ull + i)));
        while (blocks.size() < n_blocks) blocks.push_back(splitmix64(hash_key_ + ++fresh_blocks_));
        if (slot == pool_.size())
            pool_.push_back(blocks);
        else
            pool_[slot] = blocks;
        return blocks;
    }

    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
    uint64_t hash_key_;
    uint64_t fresh_blocks_ = 0;
    size_t next_slot_ = 0;
    std::vector<std::vector<uint64_t>> pool_;
};

}  // namespace

Result<SynthDrift> parse_synth_drift(std::string_view spec) {
    SynthDrift drift;
    double scale = 0;
    const auto [end, code] = std::from_chars(spec.data(), spec.data() + spec.size(), scale);
    if (code == std::errc() && end == spec.data() + spec.size()) {
        if (!(scale > 0) || !std::isfinite(scale))
            return error("--drift scale must be > 0, got {}", spec);
        drift.input_scale = scale;
        return drift;
    }
    Result<SynthPreset> preset = find_synth_preset(spec);
    if (!preset.ok())
        return error("--drift takes an input-length scale (e.g. 2) or a preset name: {}",
                     preset.error());
    drift.preset = preset->name;
    return drift;
}

Status check_synth_options(const SynthOptions &options) {
    Result<SynthPreset> first = find_synth_preset(options.preset);
    HP_TRY(first);
    double preset_rate_rps = first->rate_rps;
    if (options.drift && !options.drift->preset.empty()) {
        Result<SynthPreset> second = find_synth_preset(options.drift->preset);
        HP_TRY(second);
        preset_rate_rps = std::max(preset_rate_rps, second->rate_rps);
    }
    if (options.drift &&
        !(options.drift->input_scale > 0 && std::isfinite(options.drift->input_scale)))
        return error("--drift scale must be > 0, got {}", options.drift->input_scale);
    if (!(options.duration_s > 0 && std::isfinite(options.duration_s)))
        return error("duration must be a finite number of seconds > 0, got {}", options.duration_s);
    if (!(options.rate_rps >= 0 && std::isfinite(options.rate_rps)))
        return error(
            "rate must be a finite number of requests per second >= 0 (0: the preset's), "
            "got {}",
            options.rate_rps);
    if (std::isnan(options.drift_at_s)) return error("drift time must be a number, got nan");
    const double rate_rps = options.rate_rps > 0 ? options.rate_rps : preset_rate_rps;
    const double expected_requests = rate_rps * options.duration_s;
    if (!(expected_requests <= double(kMaxSynthRequests)))
        return error(
            "{:.6g} s at {:.6g} req/s is about {:.3g} requests, more than the {} a synthetic log "
            "may hold; shorten --duration or lower --rate",
            options.duration_s, rate_rps, expected_requests, kMaxSynthRequests);
    return Status::success();
}

Status synthesize(const SynthOptions &options, const std::function<void(const Request &)> &emit) {
    HP_TRY(check_synth_options(options));
    Result<SynthPreset> first = find_synth_preset(options.preset);
    HP_TRY(first);
    SynthPreset second = *first;
    double input_scale_after = 1;
    if (options.drift) {
        input_scale_after = options.drift->input_scale;
        if (!options.drift->preset.empty()) {
            Result<SynthPreset> other = find_synth_preset(options.drift->preset);
            HP_TRY(other);
            second = *other;
        }
    }
    const double drift_at_s = !options.drift            ? options.duration_s * 2
                              : options.drift_at_s >= 0 ? options.drift_at_s
                                                        : options.duration_s / 2;
    Generator generator(options.seed);
    double arrival_s = 0;
    for (;;) {
        const bool drifted = arrival_s >= drift_at_s;
        const SynthPreset &preset = drifted ? second : *first;
        const double rate_rps = options.rate_rps > 0 ? options.rate_rps : preset.rate_rps;
        arrival_s += generator.gap_s(preset, rate_rps);
        if (arrival_s >= options.duration_s) break;
        emit(generator.request(arrival_s >= drift_at_s ? second : *first, arrival_s,
                               arrival_s >= drift_at_s ? input_scale_after : 1.0));
    }
    return Status::success();
}

Result<std::vector<Request>> synthesize_requests(const SynthOptions &options) {
    std::vector<Request> requests;
    HP_TRY(synthesize(options, [&](const Request &request) { requests.push_back(request); }));
    return requests;
}

std::vector<Request> default_chat_requests(double duration_s, uint64_t seed) {
    SynthOptions options;
    options.preset = "chat";
    options.duration_s = duration_s;
    options.seed = seed;
    Result<std::vector<Request>> requests = synthesize_requests(options);
    HP_CHECK(requests.ok(), "the chat preset must exist: {}",
             requests.ok() ? "" : requests.error());
    return std::move(*requests);
}

Profile default_chat_profile(const ProfileOptions &options) {
    return profile_requests(default_chat_requests(), options,
                            "synth --preset chat --duration 600 --seed 1");
}

}  // namespace hp::traffic
