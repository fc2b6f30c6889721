#include <gtest/gtest.h>

#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/profile_json.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

TEST(TrafficProfileJson, RoundTripKeepsEveryFigure) {
    Result<TraceProfile> traced = profile_trace(testing::traces_dir() / "mooncake_synthetic.jsonl");
    ASSERT_TRUE(traced.ok());
    const Profile &p = traced->profile;
    Result<Profile> back = profile_from_json(profile_to_json(p));
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back->requests, p.requests);
    EXPECT_EQ(back->input_tokens.p90, p.input_tokens.p90);
    EXPECT_EQ(back->input_tokens.bins.size(), p.input_tokens.bins.size());
    EXPECT_EQ(back->prefix.hit_blocks, p.prefix.hit_blocks);
    EXPECT_NEAR(back->arrivals.rate_rps, p.arrivals.rate_rps, 1e-5 * p.arrivals.rate_rps);
    EXPECT_EQ(back->batching.steps, p.batching.steps);
    ASSERT_EQ(back->batching.cells.size(), p.batching.cells.size());
    EXPECT_EQ(back->batching.cells[0].representative.decode_kv_len,
              p.batching.cells[0].representative.decode_kv_len);
    ASSERT_EQ(back->sample_requests.size(), p.sample_requests.size());
    EXPECT_EQ(back->sample_requests[0].prefix_hashes, p.sample_requests[0].prefix_hashes);
    // Serialising again gives the same text.
    EXPECT_EQ(profile_to_json(*back), profile_to_json(p));
}

TEST(TrafficProfileJson, MalformedInputIsAnErrorNotACrash) {
    EXPECT_FALSE(profile_from_json("").ok());
    EXPECT_FALSE(profile_from_json("{\"schema\": \"other\"}").ok());
    EXPECT_FALSE(
        profile_from_json("{\"schema\": \"hotpass.profile/1\", \"requests\": \"many\"}").ok());
    testing::TempDir dir;
    EXPECT_FALSE(load_profile(dir.path() / "missing.json").ok());
}

}  // namespace
}  // namespace hp::traffic
