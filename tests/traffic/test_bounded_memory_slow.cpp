// A 10-million-row trace (~390 MB) profiles in one streaming pass: the reader's and the profile
// builder's own memory accounting stay bounded (no timers).
#include <gtest/gtest.h>

#include "azure_writer.h"
#include "hotpass/traffic/profile_builder.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

TEST(TrafficBoundedMemorySlow, TenMillionRowsProfileInBoundedMemory) {
    testing::TempDir dir;
    const auto file = dir.path() / "ten_million.csv";
    const uint64_t rows = 10'000'000;
    testing::write_azure_trace(file, rows);
    Result<std::unique_ptr<TraceReader>> reader = open_trace(file);
    ASSERT_TRUE(reader.ok()) << reader.error();
    ProfileOptions options;
    options.simulate = false;
    ProfileBuilder builder(options);
    size_t builder_peak_bytes = 0;
    Request request;
    uint64_t n = 0;
    for (;;) {
        Result<bool> got = (*reader)->next(request);
        ASSERT_TRUE(got.ok()) << got.error();
        if (!*got) break;
        builder.add(request);
        if (++n % 100000 == 0)
            builder_peak_bytes = std::max(builder_peak_bytes, builder.memory_bytes());
    }
    EXPECT_EQ((*reader)->stats().rows_ok, rows);
    EXPECT_EQ((*reader)->stats().rows_bad, 0u);
    EXPECT_LE((*reader)->stats().peak_buffer_bytes, 2 * LineReader::kBufferBytes);
    // 5000 + 300 distinct lengths and 32 sampled requests: well under 1 MiB.
    EXPECT_LE(builder_peak_bytes, size_t(1) << 20);
    const Profile profile = builder.finish(file.string(), "azure");
    EXPECT_EQ(profile.requests, rows);
    EXPECT_EQ(profile.input_tokens.max, 5000u);
    EXPECT_NEAR(profile.arrivals.rate_rps, 100.0, 1e-6);
}

}  // namespace
}  // namespace hp::traffic
