// `hotpass optimize --calibrate` end to end: before the first candidate, each tier times the
// incumbent against a second build of itself (an A/A run), and the tier's minimum effect becomes
// the difference that run shows, |speedup - 1|, never below 1%. The notes in the store
// must hold both tiers' runs with figures that follow that rule.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "hotpass/store/store.h"

namespace hp::campaign {
namespace {
namespace fs = std::filesystem;

TEST(Calibrate, EachTierRunsAnAaRunAndTakesItsDifferenceAsTheMinimumEffect) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-calibrate-" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    const fs::path db = root / "store.db", log = root / "optimize.log";
    const std::string command = fmt::format(
        "'{}' optimize --model preset:tiny-llama --fast-layers 1 --budget 20m,1 --no-final --agents knob-search:1 --calibrate "
        "--store '{}' --out '{}' > '{}' 2>&1",
        HOTPASS_CLI, db.string(), (root / "out").string(), log.string());
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << log;

    auto store = store::Store::open(db).value();
    const auto campaigns = store->campaigns().value();
    ASSERT_EQ(campaigns.size(), 1u);
    EXPECT_EQ(campaigns[0].options.value("calibrate", false), true) << "a resume would run without it";
    int n_calibrated = 0;
    const auto notes = store->notes(campaigns[0].id).value();
    for (const store::BoardNote &note : notes) {
        if (note.text.find("A/A calibration") == std::string::npos) continue;
        SCOPED_TRACE(note.text);
        char tier[16] = {};
        double speedup = 0, low = 0, high = 0, min_effect_percent = 0;
        const size_t at = note.text.find(", ") + 2;
        ASSERT_EQ(std::sscanf(note.text.c_str() + at, "%15s tier: a second build of the incumbent timed %lfx it (95%% CI %lf-%lf", tier,
                              &speedup, &low, &high),
                  4);
        const size_t exceed = note.text.find("must now exceed ");
        ASSERT_NE(exceed, std::string::npos);
        ASSERT_EQ(std::sscanf(note.text.c_str() + exceed, "must now exceed %lf%%", &min_effect_percent), 1);
        EXPECT_LE(low, speedup);
        EXPECT_LE(speedup, high);
        // 1% at least, 10% at most; the note rounds the ratio to 0.001 and the percentage to 0.1.
        EXPECT_NEAR(min_effect_percent, std::clamp(100 * std::fabs(speedup - 1), 1.0, 10.0), 0.11);
        ++n_calibrated;
    }
    EXPECT_EQ(n_calibrated, 2) << "one A/A run per tier; see " << log;
    if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

}  // namespace
}  // namespace hp::campaign
