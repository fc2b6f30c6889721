#include "hotpass/campaign/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "hotpass/core/mapped_file.h"

namespace hp::campaign {
namespace {
namespace fs = std::filesystem;

TEST(CampaignReport, WritesWinnerReportAndChartFromTheStore) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-report-" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "src");
    std::ofstream(root / "src/forward.cpp") << "int forward;";
    std::ofstream(root / "fake.so") << "ELF";
    auto store = store::Store::open(root / "store/store.db").value();
    store::ObjectStore objects(root / "store");
    const std::string source = objects.put_sources(root / "src").value();
    const int64_t profile = store->add_profile({0, "p", "chat", {{"x", 1}}, {{"fast", nlohmann::json::array()}}}).value();
    store::CampaignRecord campaign;
    campaign.model = "preset:tiny-llama";
    campaign.hardware = "cpu";
    campaign.traffic = "chat";
    campaign.profile_id = profile;
    campaign.tiers = "fast,slow";
    campaign.incumbent = "baseline";
    const int64_t id = store->add_campaign(campaign).value();
    auto add = [&](const std::string &hash, const std::string &parent, const std::string &knob) {
        store::CandidateRecord c;
        c.campaign_id = id;
        c.hash = hash;
        c.parent = parent;
        c.agent = "knob-evolve-1";
        c.knobs = {{"HP_GEMV_TOKENS", knob}};
        c.source_hash = source;
        c.state = "done";
        return store->add_candidate(c).value().value();
    };
    const int64_t first = add("aaaa1111", "baseline", "8");
    const int64_t second = add("bbbb2222", "aaaa1111", "2");
    const int64_t loser = add("cccc3333", "baseline", "1");
    ASSERT_TRUE(store->add_build({second, "k", true, false, 1, "", "", (root / "fake.so").string()}).ok());
    ASSERT_TRUE(store->add_verdict({first, "fast", "faster", "ok", 0, 0, 10}).ok());
    ASSERT_TRUE(store->add_verdict({first, "slow", "faster", "ok", 0, 0, 20}).ok());
    ASSERT_TRUE(store->add_verdict({second, "fast", "faster", "ok", 0, 0, 30}).ok());
    ASSERT_TRUE(store->add_verdict({second, "slow", "faster", "ok", 0, 0, 40}).ok());
    ASSERT_TRUE(store->add_verdict({loser, "fast", "wrong_output", "logits differ", 0, 1, 45}).ok());
    ASSERT_TRUE(store->add_promotion({id, first, "slow", "incumbent", 1.10, 20}).ok());
    ASSERT_TRUE(store->add_promotion({id, second, "slow", "incumbent", 1.05, 40}).ok());
    nlohmann::json shapes = nlohmann::json::array({{{"name", "decode b1 kv128"}, {"weight", 1.0}, {"incumbent_ms", 2.0},
                                                    {"candidate_ms", 1.7}, {"speedup", 1.176}, {"speedup_ci", {1.1, 1.2}}}});
    ASSERT_TRUE(store->add_measurement({second, "final", "baseline", 1.176, 1.1, 1.2, true, 2.0, 1.7, shapes, 50}).ok());
    ASSERT_TRUE(store->set_incumbent(id, "bbbb2222", (root / "fake.so").string()).ok());
    ASSERT_TRUE(store->set_elapsed(id, 60).ok());

    auto files = write_report(*store, id, objects, root / "out");
    ASSERT_TRUE(files.ok()) << files.error();
    EXPECT_TRUE(files->winner_measured);
    EXPECT_NEAR(files->winner_speedup, 1.176, 1e-9);
    const auto report = nlohmann::json::parse(read_text_file(files->json).value());
    EXPECT_EQ(report["winner"]["hash"], "bbbb2222");
    ASSERT_EQ(report["winner"]["lineage"].size(), 3u);  // bbbb -> aaaa -> baseline
    EXPECT_EQ(report["winner"]["lineage"][1]["hash"], "aaaa1111");
    EXPECT_EQ(report["winner"]["lineage"][2]["hash"], "baseline");
    EXPECT_NEAR(report["timeline"].back()["best_speedup"].get<double>(), 1.10 * 1.05, 1e-9);
    EXPECT_EQ(report["counts"]["verdicts"]["fast"]["wrong_output"], 1);
    EXPECT_EQ(report["counts"]["evaluations"], 5);
    const std::string svg = read_text_file(files->svg).value();
    EXPECT_NE(svg.find("<polyline"), std::string::npos);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    const std::string md = read_text_file(files->markdown).value();
    EXPECT_NE(md.find("1.176x"), std::string::npos) << md;
    EXPECT_NE(md.find("decode b1 kv128"), std::string::npos);
    EXPECT_TRUE(fs::exists(files->winner_dir / "forward.cpp"));
    EXPECT_TRUE(fs::exists(files->winner_dir / "fake.so"));
    const auto metadata = nlohmann::json::parse(read_text_file(files->winner_dir / "candidate.json").value());
    EXPECT_EQ(metadata["parent"], "aaaa1111");
    EXPECT_EQ(metadata["knobs"]["HP_GEMV_TOKENS"], "2");

    // A second report into the same folder replaces the winner folder it wrote.
    ASSERT_TRUE(write_report(*store, id, objects, root / "out").ok());
    // One that is not its own is left alone, and the report is refused (before a campaign: check_report_dir).
    fs::create_directories(root / "mine" / "winner");
    std::ofstream(root / "mine" / "winner" / "important.txt") << "mine";
    EXPECT_FALSE(check_report_dir(root / "mine").ok());
    auto refused = write_report(*store, id, objects, root / "mine");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().find("did not write"), std::string::npos) << refused.error();
    EXPECT_TRUE(fs::exists(root / "mine" / "winner" / "important.txt"));
    std::ofstream(root / "a-file") << "x";
    EXPECT_FALSE(check_report_dir(root / "a-file").ok());
    EXPECT_TRUE(check_report_dir(root / "not-yet").ok());

    auto rows = leaderboard(*store, id).value();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[2].candidate.hash, "cccc3333") << "fast-tier-only candidates rank below slow-tier ones";
    fs::remove_all(root);
}

}  // namespace
}  // namespace hp::campaign
