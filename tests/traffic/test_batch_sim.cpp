#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/batch_sim.h"

namespace hp::traffic {
namespace {

TEST(TrafficBatchSim, OneRequestChunksItsPromptThenDecodes) {
    EngineLimits limits{4, 64};
    StepCostModel cost{1.0, 0.0, 0.0};  // every step takes 1 ms
    BatchSimulator sim(limits, cost);
    sim.arrive(0.0, 100, 5);
    const BatchingSummary s = sim.finish();
    // Prefill 64 + 36 (the second chunk yields token 1), then 4 decode steps at KV 100..103.
    EXPECT_EQ(s.steps, 6u);
    EXPECT_EQ(s.tokens, 104u);
    EXPECT_EQ(s.decode_kv_len.count, 4u);
    EXPECT_EQ(s.decode_kv_len.min, 100u);
    EXPECT_EQ(s.decode_kv_len.max, 103u);
    EXPECT_EQ(s.ttft_ms.p50, 2u);
    EXPECT_NEAR(s.busy_s, 0.006, 1e-12);
    EXPECT_NEAR(s.span_s, 0.006, 1e-12);
}

TEST(TrafficBatchSim, RespectsMaxBatchAndConservesTokens) {
    EngineLimits limits{4, 1024};
    BatchSimulator sim(limits, StepCostModel{});
    uint64_t expected_tokens = 0;
    for (int i = 0; i < 10; ++i) {
        sim.arrive(0.001 * i, 200 + 10 * i, 20);
        expected_tokens += 200 + 10 * i + 19;  // the prompt, then 19 decode steps
    }
    const BatchingSummary s = sim.finish();
    EXPECT_EQ(s.concurrency.max, 4u);
    EXPECT_EQ(s.decode_batch.max, 4u);
    EXPECT_EQ(s.tokens, expected_tokens);
    EXPECT_EQ(s.ttft_ms.count, 10u);
    double cell_ms = 0;
    for (const StepCell &cell : s.cells) cell_ms += cell.time_ms;
    EXPECT_NEAR(cell_ms, s.busy_s * 1000, 1e-6);
}

TEST(TrafficBatchSim, CachedPrefixIsNotRecomputed) {
    BatchSimulator cold(EngineLimits{}, StepCostModel{}), warm(EngineLimits{}, StepCostModel{});
    cold.arrive(0, 4096, 2);
    warm.arrive(0, 4096, 2, 4096);  // at most input - 1 are honoured
    EXPECT_EQ(cold.finish().tokens, 4097u);
    EXPECT_EQ(warm.finish().tokens, 2u);
}

TEST(TrafficBatchSim, StepCostModel) {
    StepShape shape;
    shape.decode_kv_len = {10, 20};
    shape.prefill = {{100, 50}};
    EXPECT_EQ(shape.batched_tokens(), 102u);
    EXPECT_EQ(shape.kv_tokens_read(), 11u + 21u + 150u);
    const StepCostModel cost{5, 0.5, 0.01};
    EXPECT_DOUBLE_EQ(cost.step_ms(shape), 5 + 0.5 * 102 + 0.01 * 182);
}

TEST(TrafficBatchSim, IdleGapsAreNotBusyTime) {
    StepCostModel cost{1.0, 0.0, 0.0};
    BatchSimulator sim(EngineLimits{}, cost);
    sim.arrive(0, 10, 2);
    sim.arrive(100, 10, 2);
    const BatchingSummary s = sim.finish();
    EXPECT_NEAR(s.busy_s, 0.004, 1e-12);
    EXPECT_NEAR(s.span_s, 100.002, 1e-9);
    EXPECT_EQ(s.concurrency.max, 1u);
}

// The ranges a simulation runs on; the simulator's own check stops the process, so user values are
// checked with these first.
TEST(TrafficBatchSim, LimitsAndCostModelOutOfRangeAreErrors) {
    EXPECT_TRUE(check_engine_limits(EngineLimits{}).ok());
    EXPECT_TRUE(check_engine_limits(EngineLimits{1, 1}).ok());
    EXPECT_FALSE(check_engine_limits(EngineLimits{0, 8192}).ok());
    EXPECT_FALSE(check_engine_limits(EngineLimits{256, 0}).ok());
    EXPECT_TRUE(check_cost_model(StepCostModel{}).ok());
    EXPECT_TRUE(check_cost_model(StepCostModel{1.0, 0.0, 0.0}).ok());
    const double nan = std::nan(""), inf = HUGE_VAL;
    for (const StepCostModel &bad :
         {StepCostModel{0, 0.04, 0}, StepCostModel{nan, 0.04, 0}, StepCostModel{-5, 0.04, 0},
          StepCostModel{inf, 0.04, 0}, StepCostModel{5, nan, 0}, StepCostModel{5, -0.04, 0},
          StepCostModel{5, 0.04, inf}, StepCostModel{5, 0.04, -1}}) {
        const Status checked = check_cost_model(bad);
        EXPECT_FALSE(checked.ok())
            << bad.base_ms << " " << bad.per_token_ms << " " << bad.per_kv_token_ms;
    }
    const Status base = check_cost_model(StepCostModel{nan, 0.04, 0});
    ASSERT_FALSE(base.ok());
    EXPECT_NE(base.error().find("base_ms must be a finite number > 0"), std::string::npos)
        << base.error();
}

}  // namespace
}  // namespace hp::traffic
