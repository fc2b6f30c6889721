#include "hotpass/store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

namespace hp::store {
namespace {
namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("hotpass-store-test-" + std::to_string(getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::unique_ptr<Store> open() {
        auto store = Store::open(dir_ / "store.db");
        EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error());
        return std::move(store).value();
    }
    int64_t add_campaign(Store &store) {
        auto profile = store.add_profile({0, "h1", "chat", {{"p", 1}}, {{"w", 2}}});
        EXPECT_TRUE(profile.ok());
        CampaignRecord c;
        c.model = "preset:tiny-llama";
        c.hardware = "cpu";
        c.traffic = "chat";
        c.profile_id = *profile;
        c.tiers = "fast,slow";
        c.budget = {{"seconds", 60}};
        c.incumbent = "baseline";
        c.incumbent_artifact = "baseline";
        auto id = store.add_campaign(c);
        EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error());
        return *id;
    }
    fs::path dir_;
};

TEST_F(StoreTest, CreatesTheCurrentSchemaInWalMode) {
    auto store = open();
    EXPECT_EQ(store->schema_version().value(), kSchemaVersion);
    EXPECT_EQ(store->journal_mode().value(), "wal");
    store.reset();
    auto again = open();  // reopening applies nothing twice
    EXPECT_EQ(again->schema_version().value(), kSchemaVersion);
}

TEST_F(StoreTest, RefusesADatabaseFromANewerHotpass) {
    open().reset();
    sqlite3 *db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "store.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_migrations VALUES (99, 0)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto store = Store::open(dir_ / "store.db");
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.error().find("newer"), std::string::npos) << store.error();
}

TEST_F(StoreTest, RoundTripsACampaignAndItsCandidates) {
    auto store = open();
    const int64_t campaign = add_campaign(*store);
    auto record = store->campaign(campaign);
    ASSERT_TRUE(record.ok());
    EXPECT_EQ(record->model, "preset:tiny-llama");
    EXPECT_EQ(record->budget["seconds"], 60);
    EXPECT_EQ(record->status, "running");

    CandidateRecord c;
    c.campaign_id = campaign;
    c.hash = "abc123";
    c.parent = "baseline";
    c.agent = "knob-random-1";
    c.knobs = {{"HP_GEMV_TOKENS", "8"}};
    c.source_hash = "src";
    auto id = store->add_candidate(c);
    ASSERT_TRUE(id.ok() && id->has_value());
    auto duplicate = store->add_candidate(c);
    ASSERT_TRUE(duplicate.ok());
    EXPECT_FALSE(duplicate->has_value()) << "the same hash twice in one campaign is one candidate";

    ASSERT_TRUE(store->add_build({**id, "key", true, false, 3.5, "", "", "/a/b.so"}).ok());
    ASSERT_TRUE(store->add_verdict({**id, "fast", "faster", "verified; 1.1x", 0.01, 0, 12}).ok());
    ASSERT_TRUE(store->add_measurement({**id, "fast", "baseline", 1.1, 1.05, 1.15, true, 2.0, 1.8, nlohmann::json::array({{{"name", "d"}}}), 12}).ok());
    ASSERT_TRUE(store->add_promotion({campaign, **id, "fast", "slow", 1.1, 12}).ok());
    ASSERT_TRUE(store->add_note({campaign, "knob-evolve-1", "abc123", "try 16", 13}).ok());

    EXPECT_EQ(store->find_candidates("abc").value().size(), 1u);
    EXPECT_EQ(store->find_candidates("abd").value().size(), 0u);
    const auto builds = store->builds(**id).value();
    ASSERT_EQ(builds.size(), 1u);
    EXPECT_EQ(builds[0].artifact, "/a/b.so");
    const auto measurements = store->campaign_measurements(campaign).value();
    ASSERT_EQ(measurements.size(), 1u);
    EXPECT_DOUBLE_EQ(measurements[0].speedup, 1.1);
    EXPECT_TRUE(measurements[0].significant);
    EXPECT_EQ(measurements[0].shapes[0]["name"], "d");
    EXPECT_EQ(store->campaign_verdicts(campaign).value().at(0).code, "faster");
    EXPECT_EQ(store->promotions(campaign).value().at(0).to_tier, "slow");
    EXPECT_EQ(store->notes(campaign).value().at(0).text, "try 16");
    EXPECT_EQ(store->candidate(**id).value().knobs["HP_GEMV_TOKENS"], "8");
}

TEST_F(StoreTest, RoundTripsLlmExchanges) {
    auto store = open();
    const int64_t campaign = add_campaign(*store);
    ExchangeRecord e;
    e.campaign_id = campaign;
    e.agent = "llm-1";
    e.turn = 1;
    e.url = "http://127.0.0.1:8000/v1/chat/completions";
    e.model = "m";
    e.request = R"({"model": "m"})";
    e.response = "{}";
    e.http_status = 200;
    e.latency_s = 1.5;
    e.prompt_tokens = 900;
    e.completion_tokens = 50;
    ASSERT_TRUE(store->add_exchange(e).ok());
    e.agent = "llm-2";
    e.http_status = 0;
    e.error = "unreachable";
    ASSERT_TRUE(store->add_exchange(e).ok());
    const auto all = store->exchanges(campaign).value();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].http_status, 200);
    EXPECT_DOUBLE_EQ(all[0].latency_s, 1.5);
    EXPECT_EQ(all[0].prompt_tokens, 900);
    EXPECT_EQ(all[1].error, "unreachable");
    const auto one = store->exchanges(campaign, "llm-2").value();
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].agent, "llm-2");
}

TEST_F(StoreTest, MigratesAVersionOneDatabaseForwardKeepingItsRows) {
    {
        auto store = open();
        add_campaign(*store);
    }
    // Back to what a version-1 hotpass left: no llm_exchanges, version 1 recorded.
    sqlite3 *db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "store.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DROP TABLE llm_exchanges; DELETE FROM schema_migrations WHERE version > 1", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto store = open();
    EXPECT_EQ(store->schema_version().value(), kSchemaVersion);
    EXPECT_EQ(store->campaigns().value().size(), 1u);
    EXPECT_TRUE(store->exchanges(1).ok());
}

TEST_F(StoreTest, InFlightCandidatesBecomeLost) {
    auto store = open();
    const int64_t campaign = add_campaign(*store);
    const char *states[] = {"queued", "built", "evaluating", "promoted", "evaluating_slow", "done"};
    for (int i = 0; i < 6; ++i) {
        CandidateRecord c;
        c.campaign_id = campaign;
        c.hash = "h" + std::to_string(i);
        c.state = states[i];
        ASSERT_TRUE(store->add_candidate(c).ok());
    }
    EXPECT_EQ(store->mark_in_flight_lost(campaign).value(), 2);
    EXPECT_EQ(store->count_candidates(campaign, "lost").value(), 2);
    EXPECT_EQ(store->count_candidates(campaign, "queued").value(), 1);
    EXPECT_EQ(store->count_candidates(campaign, "promoted").value(), 1);
    EXPECT_EQ(store->count_candidates(campaign).value(), 6);
}

TEST_F(StoreTest, ConcurrentWritersFromThreadsAndASecondConnection) {
    auto store = open();
    const int64_t campaign = add_campaign(*store);
    auto other = open();  // a second connection, as `hotpass show` beside a running campaign
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            Store &target = t % 2 ? *store : *other;
            for (int i = 0; i < 25; ++i) ASSERT_TRUE(target.add_note({campaign, "a", "", std::to_string(t * 100 + i), 0}).ok());
        });
    }
    for (auto &thread : threads) thread.join();
    EXPECT_EQ(store->notes(campaign, 1000).value().size(), 100u);
    EXPECT_EQ(store->notes(campaign, 10).value().size(), 10u);
}

// Two processes opening a fresh store at once (a campaign and `hotpass show`, or a test polling
// a campaign it just started) must both see one schema: the version is read inside the
// migration's own write transaction, so nobody applies a migration another connection has applied.
TEST_F(StoreTest, ConnectionsOpeningAFreshStoreAtOnceAllSucceed) {
    for (int round = 0; round < 20; ++round) {
        fs::remove_all(dir_);
        std::vector<std::thread> threads;
        std::vector<std::string> errors(6);
        for (size_t t = 0; t < errors.size(); ++t) {
            threads.emplace_back([&, t] {
                auto store = Store::open(dir_ / "store.db");
                if (!store.ok()) errors[t] = store.error();
                else if ((*store)->schema_version().value() != kSchemaVersion) errors[t] = "wrong schema version";
            });
        }
        for (auto &thread : threads) thread.join();
        for (const std::string &e : errors) ASSERT_EQ(e, "") << "round " << round;
    }
}

}  // namespace
}  // namespace hp::store
