#include <gtest/gtest.h>

#include "hotpass/traffic/drift.h"
#include "hotpass/traffic/profile_builder.h"
#include "synth_fixture.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

SynthOptions chat_hour(uint64_t seed) {
    SynthOptions options;
    options.preset = "chat";
    options.duration_s = 3600;
    options.seed = seed;
    return options;
}

TEST(TrafficDrift, StationarySyntheticHalvesDoNotDrift) {
    for (uint64_t seed : {1, 2, 3}) {
        const auto [first, second] = testing::synth_halves(chat_hour(seed));
        const DriftReport report = compare_profiles(first, second);
        EXPECT_FALSE(report.drift) << "seed " << seed << ": " << report.reason;
        EXPECT_TRUE(report.enough_data);
        EXPECT_LT(report.score, 1.0);
        EXPECT_NE(report.reason.find("no drift"), std::string::npos);
    }
}

TEST(TrafficDrift, PromptsDoublingHalfwayDrifts) {
    SynthOptions options = chat_hour(1);
    options.drift = SynthDrift{2.0, ""};
    const auto [first, second] = testing::synth_halves(options);
    const DriftReport report = compare_profiles(first, second);
    EXPECT_TRUE(report.drift);
    EXPECT_GE(report.score, 1.0);
    // The input lengths moved, the outputs did not.
    EXPECT_EQ(report.reason.rfind("P90 input", 0), 0u) << report.reason;
    EXPECT_EQ(report.reason.find("output"), std::string::npos) << report.reason;
    for (const DriftStatistic &stat : report.statistics)
        if (stat.name == "p90_input") {
            EXPECT_NEAR(stat.value, 1.0, 0.15);
        }
}

TEST(TrafficDrift, SwitchingPresetHalfwayDrifts) {
    SynthOptions options = chat_hour(4);
    options.drift = SynthDrift{1.0, "code"};
    const auto [first, second] = testing::synth_halves(options);
    const DriftReport report = compare_profiles(first, second);
    EXPECT_TRUE(report.drift);
    EXPECT_NE(report.reason.find("output"), std::string::npos) << report.reason;
}

TEST(TrafficDrift, AzureCodeAgainstConversationDrifts) {
    ProfileOptions options;
    options.simulate = false;
    Result<TraceProfile> code =
        profile_trace(testing::traces_dir() / "azure_llm_2023_code.csv", {}, {}, options);
    Result<TraceProfile> conv =
        profile_trace(testing::traces_dir() / "azure_llm_2023_conv.csv", {}, {}, options);
    ASSERT_TRUE(code.ok() && conv.ok());
    const DriftReport report = compare_profiles(code->profile, conv->profile);
    EXPECT_TRUE(report.drift);
    // P90 output 55 -> 424 is the largest move; P90 input 5194 -> 2735 (-47%) follows.
    EXPECT_EQ(report.reason.rfind("P90 output 55 → 424 tokens (+671%)", 0), 0u) << report.reason;
    EXPECT_NE(report.reason.find("P90 input 5.2k → 2.7k tokens (-47%)"), std::string::npos)
        << report.reason;
    // A trace against itself: nothing moves.
    EXPECT_FALSE(compare_profiles(conv->profile, conv->profile).drift);
}

TEST(TrafficDrift, ThresholdsAreConfigurable) {
    SynthOptions options = chat_hour(1);
    options.drift = SynthDrift{2.0, ""};
    const auto [first, second] = testing::synth_halves(options);
    DriftThresholds lenient;
    lenient.ks = 0.9;
    lenient.psi = 10;
    lenient.p90_change = 5;
    EXPECT_FALSE(compare_profiles(first, second, lenient).drift);
    DriftThresholds too_few;
    too_few.min_requests = 1'000'000;
    const DriftReport report = compare_profiles(first, second, too_few);
    EXPECT_FALSE(report.enough_data);
    EXPECT_FALSE(report.drift);
}

TEST(TrafficDrift, PrefixReuseAndExpertLoad) {
    Profile a, b;
    a.requests = b.requests = 1000;
    a.prefix.known = b.prefix.known = true;
    a.prefix.reuse = 0.60;
    b.prefix.reuse = 0.20;
    a.expert_load.layers = {{{100, 100, 100, 100}, 0}};
    b.expert_load.layers = {{{400, 0, 0, 0}, 0}};
    update_imbalance(a.expert_load);
    update_imbalance(b.expert_load);
    const DriftReport report = compare_profiles(a, b);
    EXPECT_TRUE(report.drift);
    EXPECT_NE(report.reason.find("prefix reuse 60% → 20%"), std::string::npos) << report.reason;
    EXPECT_NE(report.reason.find("expert imbalance (max/mean) 1.00 → 4.00"), std::string::npos)
        << report.reason;
}

}  // namespace
}  // namespace hp::traffic
