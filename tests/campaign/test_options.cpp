#include <gtest/gtest.h>

#include "hotpass/campaign/options.h"

namespace hp::campaign {
namespace {

TEST(CampaignOptions, ParsesBudgets) {
    EXPECT_DOUBLE_EQ(parse_budget("3m").value().seconds, 180);
    EXPECT_DOUBLE_EQ(parse_budget("90s").value().seconds, 90);
    EXPECT_DOUBLE_EQ(parse_budget("1.5h").value().seconds, 5400);
    EXPECT_EQ(parse_budget("40").value().candidates, 40);
    const Budget both = parse_budget("20m,100").value();
    EXPECT_DOUBLE_EQ(both.seconds, 1200);
    EXPECT_EQ(both.candidates, 100);
    EXPECT_FALSE(parse_budget("3x").ok());
    EXPECT_FALSE(parse_budget("").ok());
    EXPECT_FALSE(parse_budget("soon").ok());
    // Not finite, not whole, or beyond what a campaign could mean: errors, not a garbled clock.
    for (const char *bad : {"infh", "nan", "inf", "1e9h", "31d", "2.5", "-3m", "2000000"}) EXPECT_FALSE(parse_budget(bad).ok()) << bad;
    EXPECT_DOUBLE_EQ(parse_budget("720h").value().seconds, 720 * 3600.0);
}

TEST(CampaignOptions, ParsesAgentSpecs) {
    auto two = parse_agent_specs("knob-search:2").value();
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0].kind, "knob-random");
    EXPECT_EQ(two[1].kind, "knob-evolve");
    auto three = parse_agent_specs("knob-search:3").value();
    EXPECT_EQ(three[0].count, 2);
    EXPECT_EQ(three[1].count, 1);
    auto explicit_ = parse_agent_specs("knob-evolve:4,knob-random").value();
    ASSERT_EQ(explicit_.size(), 2u);
    EXPECT_EQ(explicit_[0].count, 4);
    EXPECT_EQ(explicit_[1].count, 1);
    auto mixed = parse_agent_specs("knob-search:1,command:2,llm").value();
    ASSERT_EQ(mixed.size(), 3u);
    EXPECT_EQ(mixed[1].kind, "command");
    EXPECT_EQ(mixed[1].count, 2);
    EXPECT_EQ(mixed[2].kind, "llm");
    EXPECT_EQ(mixed[2].count, 1);
    EXPECT_FALSE(parse_agent_specs("gpt:1").ok());
    EXPECT_FALSE(parse_agent_specs("command:x").ok());
    EXPECT_FALSE(parse_agent_specs("knob-random:0").ok());
    EXPECT_FALSE(parse_agent_specs("").ok());
}

}  // namespace
}  // namespace hp::campaign
