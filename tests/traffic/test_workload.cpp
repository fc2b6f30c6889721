#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/workload.h"
#include "hotpass/traffic/workload_json.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

const Profile &conversation_profile() {
    static const Profile profile = [] {
        Result<TraceProfile> traced =
            profile_trace(testing::traces_dir() / "azure_llm_2023_conv.csv");
        HP_CHECK(traced.ok(), "{}", traced.ok() ? "" : traced.error());
        return traced->profile;
    }();
    return profile;
}

TEST(TrafficWorkload, BoundedWeightedShapesCoverTheProfile) {
    const Profile &profile = conversation_profile();
    Result<Workload> slow = derive_workload(profile, {Tier::slow, 16, 32});
    ASSERT_TRUE(slow.ok()) << slow.error();
    EXPECT_LE(slow->shapes.size(), 16u);
    EXPECT_EQ(slow->requests.size(), 32u);
    double weight = 0, steps = 0;
    for (const WorkloadShape &shape : slow->shapes) {
        weight += shape.weight;
        steps += shape.step_share;
        EXPECT_GT(shape.shape.batched_tokens(), 0u);
        EXPECT_LE(shape.shape.decode_batch(), profile.batching.limits.max_batch);
        EXPECT_LE(shape.shape.batched_tokens(), profile.batching.limits.max_batched_tokens);
    }
    EXPECT_NEAR(weight, 1.0, 1e-9);
    EXPECT_NEAR(steps, 1.0, 1e-9);
    for (size_t i = 1; i < slow->shapes.size(); ++i)
        EXPECT_GE(slow->shapes[i - 1].weight, slow->shapes[i].weight);

    Result<Workload> fast = derive_workload(profile, {Tier::fast, 4, 8});
    ASSERT_TRUE(fast.ok());
    EXPECT_EQ(fast->shapes.size(), 4u);
    EXPECT_LT(fast->coverage, slow->coverage);
    EXPECT_GT(slow->coverage, 0.5);
}

// The weighted shapes predict the simulated throughput of the whole profile.
TEST(TrafficWorkload, WeightedStepTimePredictsTokensPerSecond) {
    const Profile &profile = conversation_profile();
    Result<Workload> workload = derive_workload(profile, {Tier::slow, 16, 0});
    ASSERT_TRUE(workload.ok());
    const double simulated = double(profile.batching.tokens) / profile.batching.busy_s;
    EXPECT_NEAR(workload->predicted_tokens_per_s / simulated, 1.0, 0.15)
        << workload->predicted_tokens_per_s << " vs " << simulated;
    // Even four shapes keep prefill in the mix, so the fast tier's prediction stays close.
    Result<Workload> fast = derive_workload(profile, {Tier::fast, 4, 0});
    ASSERT_TRUE(fast.ok());
    size_t with_prefill = 0;
    for (const WorkloadShape &shape : fast->shapes) with_prefill += !shape.shape.prefill.empty();
    EXPECT_GE(with_prefill, 1u);
    EXPECT_LT(with_prefill, 4u);
    EXPECT_NEAR(fast->predicted_tokens_per_s / simulated, 1.0, 0.35)
        << fast->predicted_tokens_per_s << " vs " << simulated;
}

TEST(TrafficWorkload, RejectsTooManyShapesAndUnsimulatedProfiles) {
    EXPECT_FALSE(derive_workload(conversation_profile(), {Tier::fast, 5, 0}).ok());
    EXPECT_FALSE(derive_workload(conversation_profile(), {Tier::slow, 17, 0}).ok());
    EXPECT_FALSE(derive_workload(conversation_profile(), {Tier::slow, 0, 0}).ok());
    Profile unsimulated;
    EXPECT_FALSE(derive_workload(unsimulated).ok());
}

TEST(TrafficWorkload, JsonRoundTrip) {
    Result<Workload> workload = derive_workload(conversation_profile(), {Tier::fast, 4, 4});
    ASSERT_TRUE(workload.ok());
    Result<Workload> back = workload_from_json(workload_to_json(*workload));
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back->tier, Tier::fast);
    ASSERT_EQ(back->shapes.size(), workload->shapes.size());
    for (size_t i = 0; i < back->shapes.size(); ++i) {
        EXPECT_EQ(back->shapes[i].shape.decode_kv_len, workload->shapes[i].shape.decode_kv_len);
        EXPECT_EQ(back->shapes[i].shape.prefill_tokens(),
                  workload->shapes[i].shape.prefill_tokens());
        EXPECT_NEAR(back->shapes[i].weight, workload->shapes[i].weight, 1e-5);
    }
    EXPECT_EQ(back->requests.size(), 4u);
    EXPECT_FALSE(
        workload_from_json("{\"schema\": \"hotpass.workload/1\", \"tier\": \"slow\"}").ok());
    EXPECT_FALSE(workload_from_json("[1, 2]").ok());
    EXPECT_FALSE(workload_from_json(R"({"schema": "hotpass.workload/1", "tier": "slow",
        "limits": {"max_batch": 1, "max_batched_tokens": 1}, "cost_model": {"base_ms": 1,
        "per_token_ms": 0, "per_kv_token_ms": 0}, "coverage": 1, "shapes": [{"weight": 1,
        "decode": {"batch": 2, "kv_len": [1]}, "prefill": []}]})")
                     .ok());
}

// The --no-sim advice is for a profile made with --no-sim; an empty simulated profile says it
// holds no requests.
TEST(TrafficWorkload, SaysWhyAProfileHasNoShapes) {
    Profile unsimulated;
    unsimulated.source = "a.csv";
    Result<Workload> workload = derive_workload(unsimulated);
    ASSERT_FALSE(workload.ok());
    EXPECT_NE(workload.error().find("--no-sim"), std::string::npos) << workload.error();
    Profile empty;
    empty.source = "b.csv";
    empty.batching.simulated = true;
    workload = derive_workload(empty);
    ASSERT_FALSE(workload.ok());
    EXPECT_NE(workload.error().find("holds no requests"), std::string::npos) << workload.error();
    EXPECT_EQ(workload.error().find("--no-sim"), std::string::npos) << workload.error();
}

}  // namespace
}  // namespace hp::traffic
