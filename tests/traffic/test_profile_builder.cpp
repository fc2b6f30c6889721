// Profile figures on the shared traces, checked against values computed independently with the
// one-liners beside each constant (run from the repository root, T=../shared/data/traces).
#include <gtest/gtest.h>

#include <cmath>

#include "hotpass/traffic/profile_builder.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

// Nearest-rank percentiles of column c:
// awk -F, 'NR>1{print $c+0}' $T/azure_llm_2023_code.csv | sort -n | awk '{v[NR]=$1; s+=$1} END
//   {printf "n=%d mean=%.4f p50=%d p90=%d p99=%d", NR, s/NR, v[int(NR*0.5+0.999999)],
//    v[int(NR*0.9+0.999999)], v[int(NR*0.99+0.999999)]}'
TEST(TrafficProfileBuilder, AzureCodeMatchesIndependentFigures) {
    Result<TraceProfile> traced = profile_trace(testing::traces_dir() / "azure_llm_2023_code.csv");
    ASSERT_TRUE(traced.ok()) << traced.error();
    const Profile &p = traced->profile;
    EXPECT_EQ(p.requests, 8819u);
    EXPECT_NEAR(p.input_tokens.mean, 2047.8483, 1e-3);  // c=2: n=8819 mean=2047.8483
    EXPECT_EQ(p.input_tokens.p50, 1469u);               // p50=1469 p90=5194 p99=7436
    EXPECT_EQ(p.input_tokens.p90, 5194u);
    EXPECT_EQ(p.input_tokens.p99, 7436u);
    EXPECT_NEAR(p.output_tokens.mean, 27.8825, 1e-3);  // c=3: mean=27.8825 p50=13 p90=55 p99=252
    EXPECT_EQ(p.output_tokens.p50, 13u);
    EXPECT_EQ(p.output_tokens.p90, 55u);
    EXPECT_EQ(p.output_tokens.p99, 252u);
    // python3: (n-1)/(t_last-t_first) with datetime.strptime -> 2.566395; gap std/mean -> 13.1513
    EXPECT_NEAR(p.arrivals.rate_rps, 2.566395, 1e-5);
    EXPECT_NEAR(p.arrivals.interarrival_cv, 13.1513, 1e-3);
    EXPECT_FALSE(p.prefix.known);
}

TEST(TrafficProfileBuilder, AzureConversationMatchesIndependentFigures) {
    Result<TraceProfile> traced = profile_trace(testing::traces_dir() / "azure_llm_2023_conv.csv");
    ASSERT_TRUE(traced.ok()) << traced.error();
    const Profile &p = traced->profile;
    EXPECT_EQ(p.requests, 19366u);
    EXPECT_NEAR(p.input_tokens.mean, 1154.6974, 1e-3);  // same awk, conv, c=2
    EXPECT_EQ(p.input_tokens.p50, 1020u);
    EXPECT_EQ(p.input_tokens.p90, 2735u);
    EXPECT_EQ(p.input_tokens.p99, 4142u);
    EXPECT_EQ(p.output_tokens.p50, 129u);  // c=3: p50=129 p90=424 p99=601
    EXPECT_EQ(p.output_tokens.p90, 424u);
    EXPECT_EQ(p.output_tokens.p99, 601u);
    EXPECT_NEAR(p.arrivals.rate_rps, 5.530136, 1e-5);
    EXPECT_NEAR(p.arrivals.interarrival_cv, 1.0942, 1e-3);
}

// python3 -c "import json;s=set();h=t=0
// for l in open('$T/mooncake_conversation.jsonl'):
//   ids=json.loads(l)['hash_ids'];k=0
//   while k<len(ids) and ids[k] in s:k+=1
//   h+=k;t+=len(ids);s.update(ids)
// print(h,t,h/t)"                                   -> 105710 288500 0.36641
// python3 -c "import json,math;v=sorted(json.loads(l)['input_length'] for l in open(
//   '$T/mooncake_conversation.jsonl'));n=len(v);print(n,sum(v)/n,[v[math.ceil(p*n)-1]
//   for p in (.5,.9,.99)])"                         -> 12031 12035.0613 [6909, 27367, 85401]
TEST(TrafficProfileBuilder, MooncakePrefixReuseMatchesIndependentFigures) {
    ProfileOptions options;
    options.simulate = false;  // the default engine is saturated by this trace; not tested here
    Result<TraceProfile> traced =
        profile_trace(testing::traces_dir() / "mooncake_conversation.jsonl", {}, {}, options);
    ASSERT_TRUE(traced.ok()) << traced.error();
    const Profile &p = traced->profile;
    EXPECT_EQ(p.requests, 12031u);
    EXPECT_NEAR(p.input_tokens.mean, 12035.0613, 1e-3);
    EXPECT_EQ(p.input_tokens.p50, 6909u);
    EXPECT_EQ(p.input_tokens.p90, 27367u);
    EXPECT_EQ(p.input_tokens.p99, 85401u);
    EXPECT_TRUE(p.prefix.known);
    EXPECT_EQ(p.prefix.blocks, 288500u);
    EXPECT_EQ(p.prefix.hit_blocks, 105710u);
    EXPECT_NEAR(p.prefix.reuse, 0.366412, 1e-6);
    EXPECT_EQ(p.sample_requests.size(), 32u);
}

TEST(TrafficProfileBuilder, SmallPrefixCacheEvictsAndLowersReuse) {
    ProfileOptions options;
    options.simulate = false;
    options.prefix_cache_blocks = 4;
    ProfileBuilder builder(options);
    Request a;
    a.input_tokens = 3 * 512;
    a.prefix_hashes = {1, 2, 3};
    builder.add(a);  // cache: 1 2 3
    a.arrival_s = 1;
    builder.add(a);  // 3 hits
    Request b = a;
    b.prefix_hashes = {7, 8, 9};
    builder.add(b);  // evicts 1 and 2
    builder.add(a);  // 1 is gone: a prefix cache serves nothing of a
    const Profile p = builder.finish("test", "test");
    EXPECT_EQ(p.prefix.blocks, 12u);
    EXPECT_EQ(p.prefix.hit_blocks, 3u);
}

TEST(TrafficProfileBuilder, ExpertLoadImbalance) {
    ProfileOptions options;
    options.simulate = false;
    ProfileBuilder builder(options);
    Request request;
    request.input_tokens = 10;
    request.expert_tokens = {{10, 10, 10, 10}, {40, 0, 0, 0}};
    builder.add(request);
    builder.add(request);
    const Profile p = builder.finish("test", "test");
    ASSERT_EQ(p.expert_load.layers.size(), 2u);
    EXPECT_EQ(p.expert_load.layers[1].tokens[0], 80u);
    EXPECT_DOUBLE_EQ(p.expert_load.layers[0].imbalance, 1.0);
    EXPECT_DOUBLE_EQ(p.expert_load.layers[1].imbalance, 4.0);
    EXPECT_DOUBLE_EQ(p.expert_load.mean_imbalance, 2.5);
}

// Engine options from a user reach profile_trace: out of range they are an error, not an abort in
// the simulator or a simulation that never ends (NaN step time).
TEST(TrafficProfileBuilder, EngineOptionsOutOfRangeAreErrors) {
    const auto trace = testing::traces_dir() / "azure_llm_2023_code.csv";
    ProfileOptions no_batch;
    no_batch.limits.max_batch = 0;
    Result<TraceProfile> traced = profile_trace(trace, {}, {}, no_batch);
    ASSERT_FALSE(traced.ok());
    EXPECT_NE(traced.error().find("max_batch"), std::string::npos) << traced.error();
    ProfileOptions nan_step;
    nan_step.cost.per_token_ms = std::nan("");
    traced = profile_trace(trace, {}, {}, nan_step);
    ASSERT_FALSE(traced.ok());
    EXPECT_NE(traced.error().find("per_token_ms"), std::string::npos) << traced.error();
    ProfileOptions negative_base;
    negative_base.cost.base_ms = -1;
    EXPECT_FALSE(check_profile_options(negative_base).ok());
}

// A trace with no valid row is an error that says so, quotes the first reasons and points at
// --format (the usual cause), instead of an empty profile.
TEST(TrafficProfileBuilder, NoValidRowIsAnError) {
    testing::TempDir dir;
    const auto all_bad = dir.write("bad.csv",
                                   "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2023-11-16 18:00:00.0,x,1\n2023-11-16 18:00:01.0,1,y\n");
    Result<TraceProfile> traced = profile_trace(all_bad);
    ASSERT_FALSE(traced.ok());
    EXPECT_NE(traced.error().find("no valid request: all 2 rows are bad"), std::string::npos)
        << traced.error();
    EXPECT_NE(traced.error().find("line 2: ContextTokens is not an integer (x)"), std::string::npos)
        << traced.error();
    EXPECT_NE(traced.error().find("--format"), std::string::npos) << traced.error();

    traced =
        profile_trace(testing::traces_dir() / "azure_llm_2023_code.csv", TraceFormat::mooncake);
    ASSERT_FALSE(traced.ok());
    EXPECT_NE(traced.error().find("in the mooncake format"), std::string::npos) << traced.error();

    const auto header_only = dir.write("empty.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n");
    traced = profile_trace(header_only);
    ASSERT_FALSE(traced.ok());
    EXPECT_NE(traced.error().find("no data rows"), std::string::npos) << traced.error();
}

}  // namespace
}  // namespace hp::traffic
