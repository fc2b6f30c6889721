#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/synth.h"
#include "synth_fixture.h"

namespace hp::traffic {
namespace {

Profile synth_profile(const std::string &preset, double duration_s, uint64_t seed = 1) {
    SynthOptions options;
    options.preset = preset;
    options.duration_s = duration_s;
    options.seed = seed;
    Result<std::vector<Request>> requests = synthesize_requests(options);
    HP_CHECK(requests.ok(), "{}", requests.ok() ? "" : requests.error());
    ProfileOptions profile_options;
    profile_options.simulate = false;
    return profile_requests(*requests, profile_options, preset);
}

TEST(TrafficSynth, DeterministicForASeed) {
    SynthOptions options;
    options.duration_s = 60;
    Result<std::vector<Request>> a = synthesize_requests(options), b = synthesize_requests(options);
    options.seed = 2;
    Result<std::vector<Request>> c = synthesize_requests(options);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i)
        EXPECT_EQ(request_to_jsonl((*a)[i]), request_to_jsonl((*b)[i]));
    EXPECT_NE(request_to_jsonl(a->front()), request_to_jsonl(c->front()));
}

// The presets reproduce the traces they were fitted on (figures in test_profile_builder.cpp and
// docs/traffic.md): within 10% on P50/P90, rate within 5%, prefix reuse within 5 points.
TEST(TrafficSynth, PresetsReproduceTheirTraces) {
    const struct {
        const char *preset;
        double input_p50, input_p90, output_p50, output_p90, rate_rps, reuse;
    } cases[] = {{"chat", 1020, 2735, 129, 424, 5.530, -1},
                 {"code", 1469, 5194, 13, 55, 2.566, -1},
                 {"long-context", 11587, 38615, 69, 389, 3.906, 0.640},
                 {"agentic", 6909, 27367, 350, 597, 3.401, 0.366}};
    for (const auto &c : cases) {
        const Profile p = synth_profile(c.preset, 4 * 3600);
        EXPECT_NEAR(double(p.input_tokens.p50) / c.input_p50, 1.0, 0.10) << c.preset;
        EXPECT_NEAR(double(p.input_tokens.p90) / c.input_p90, 1.0, 0.10) << c.preset;
        EXPECT_NEAR(double(p.output_tokens.p50) / c.output_p50, 1.0, 0.10) << c.preset;
        EXPECT_NEAR(double(p.output_tokens.p90) / c.output_p90, 1.0, 0.10) << c.preset;
        EXPECT_NEAR(p.arrivals.rate_rps / c.rate_rps, 1.0, 0.05) << c.preset;
        if (c.reuse < 0) {
            EXPECT_FALSE(p.prefix.known) << c.preset;
        } else {
            EXPECT_NEAR(p.prefix.reuse, c.reuse, 0.05) << c.preset;
        }
    }
}

TEST(TrafficSynth, RateAndDriftOptions) {
    SynthOptions options;
    options.rate_rps = 20;
    options.duration_s = 600;
    options.drift = SynthDrift{3.0, ""};
    const auto [first, second] = testing::synth_halves(options);
    EXPECT_NEAR(double(first.requests + second.requests) / 600, 20, 1.0);
    EXPECT_NEAR(double(second.input_tokens.p50) / double(first.input_tokens.p50), 3.0, 0.4);
    EXPECT_NEAR(double(second.output_tokens.p50) / double(first.output_tokens.p50), 1.0, 0.1);
}

TEST(TrafficSynth, BadOptionsAreErrors) {
    SynthOptions options;
    options.preset = "poetry";
    EXPECT_FALSE(synthesize_requests(options).ok());
    options.preset = "chat";
    options.duration_s = 0;
    EXPECT_FALSE(synthesize_requests(options).ok());
    EXPECT_FALSE(parse_synth_drift("-1").ok());
    EXPECT_FALSE(parse_synth_drift("poetry").ok());
    EXPECT_EQ(parse_synth_drift("1.5")->input_scale, 1.5);
    EXPECT_EQ(parse_synth_drift("agentic")->preset, "agentic");
}

TEST(TrafficSynth, DefaultChatProfileForTheCampaign) {
    const Profile profile = default_chat_profile();
    EXPECT_GT(profile.requests, 3000u);  // 10 minutes at ~5.5 req/s
    EXPECT_TRUE(profile.batching.simulated);
    EXPECT_FALSE(profile.batching.cells.empty());
}

// Infinite or NaN rates and durations, and logs too large to write, are refused before anything
// is generated (an infinite rate used to emit requests at t = 0 forever).
TEST(TrafficSynth, NonFiniteOrHugeOptionsAreErrors) {
    const double nan = std::nan(""), inf = HUGE_VAL;
    const auto with = [](double rate_rps, double duration_s) {
        SynthOptions options;
        options.rate_rps = rate_rps;
        options.duration_s = duration_s;
        return options;
    };
    EXPECT_TRUE(check_synth_options(with(0, 600)).ok());
    EXPECT_TRUE(check_synth_options(with(5, 3600)).ok());
    for (const SynthOptions &bad :
         {with(inf, 10), with(nan, 10), with(-5, 10), with(0, inf), with(0, nan), with(0, -1)})
        EXPECT_FALSE(check_synth_options(bad).ok()) << bad.rate_rps << " " << bad.duration_s;
    const Status huge = check_synth_options(with(1e6, 1e3));
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.error().find("more than the 20000000"), std::string::npos) << huge.error();
    SynthOptions switched = with(0, 7e6);  // code's 2.6 req/s fits, agentic's 3.4 does not
    switched.preset = "code";
    EXPECT_TRUE(check_synth_options(switched).ok());
    switched.drift = SynthDrift{1, "agentic"};
    EXPECT_FALSE(check_synth_options(switched).ok());
    EXPECT_FALSE(synthesize_requests(with(nan, 10)).ok());  // was: the preset's rate
}

}  // namespace
}  // namespace hp::traffic
