#include "hotpass/campaign/promotion.h"

#include <gtest/gtest.h>

namespace hp::campaign {
namespace {

TEST(RepeatBeforePromote, OneSlowTierWinIsRepeatedNotPromoted) {
    const SlowTierOutcome once = decide_slow_tier({{"faster", 1.08}});
    EXPECT_EQ(once.decision, SlowTierDecision::run_again);
    EXPECT_EQ(decide_slow_tier({}).decision, SlowTierDecision::run_again);
}

TEST(RepeatBeforePromote, TwoIndependentWinsPromoteWithTheSmallerSpeedup) {
    const SlowTierOutcome twice = decide_slow_tier({{"faster", 1.08}, {"faster", 1.05}});
    EXPECT_EQ(twice.decision, SlowTierDecision::promote);
    EXPECT_DOUBLE_EQ(twice.speedup, 1.05);
    EXPECT_DOUBLE_EQ(decide_slow_tier({{"faster", 1.02}, {"faster", 1.09}}).speedup, 1.02);
}

TEST(RepeatBeforePromote, AnyRunThatIsNotFasterRejects) {
    const SlowTierOutcome noise = decide_slow_tier({{"faster", 1.08}, {"not_faster", 1.01}});
    EXPECT_EQ(noise.decision, SlowTierDecision::reject);
    EXPECT_NE(noise.reason.find("not_faster"), std::string::npos);
    EXPECT_EQ(decide_slow_tier({{"faster", 1.1}, {"wrong_after_timing", 0}}).decision, SlowTierDecision::reject);
    EXPECT_EQ(decide_slow_tier({{"not_faster", 1.0}}).decision, SlowTierDecision::reject);
}

TEST(RepeatBeforePromote, TheNumberOfRunsIsAParameter) {
    EXPECT_EQ(decide_slow_tier({{"faster", 1.1}}, 1).decision, SlowTierDecision::promote);
    EXPECT_EQ(decide_slow_tier({{"faster", 1.1}, {"faster", 1.1}}, 3).decision, SlowTierDecision::run_again);
    EXPECT_EQ(kSlowRunsToPromote, 2);
}

}  // namespace
}  // namespace hp::campaign
