// The campaign store: a SQLite database (WAL) holding campaigns, candidates, builds, verdicts,
// measurements, promotions, board notes, traffic profiles and llm exchanges, with a versioned schema migrated
// forward on open. Every write is its own transaction, so a process killed at any moment leaves
// the database at the last completed write. One connection per Store, serialised by a mutex, so a
// Store may be shared by the campaign's threads. Failures (a locked or corrupt file) are data.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/store/records.h"

struct sqlite3;

namespace hp::store {

inline constexpr int kSchemaVersion = 2;

class Store {
public:
    // Opens (creating if needed) the database at `path`, enables WAL and applies migrations. A
    // database written by a newer hotpass (schema version above kSchemaVersion) is an error.
    static Result<std::unique_ptr<Store>> open(const std::filesystem::path &path);
    ~Store();
    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;

    const std::filesystem::path &path() const { return path_; }
    Result<int> schema_version();
    Result<std::string> journal_mode();

    Result<int64_t> add_campaign(const CampaignRecord &campaign);
    Result<CampaignRecord> campaign(int64_t id);
    Result<std::vector<CampaignRecord>> campaigns();
    Status set_campaign_status(int64_t id, const std::string &status);
    Status set_incumbent(int64_t id, const std::string &hash, const std::string &artifact);
    Status set_elapsed(int64_t id, double elapsed_s);

    Result<int64_t> add_profile(const ProfileRecord &profile);  // deduplicated by hash
    Result<ProfileRecord> profile(int64_t id);

    // Inserts a candidate; nullopt when the campaign already holds one with this hash.
    Result<std::optional<int64_t>> add_candidate(const CandidateRecord &candidate);
    Status set_candidate_state(int64_t id, const std::string &state);
    Result<CandidateRecord> candidate(int64_t id);
    // All of a campaign's candidates (state empty) or those in one state, oldest first.
    Result<std::vector<CandidateRecord>> candidates(int64_t campaign_id, const std::string &state = "");
    // Candidates (of any campaign) whose hash starts with `prefix`.
    Result<std::vector<CandidateRecord>> find_candidates(const std::string &prefix);
    Result<int64_t> count_candidates(int64_t campaign_id, const std::string &state = "");
    // After a crash: in-flight candidates (built/evaluating) become `lost`; returns how many.
    Result<int> mark_in_flight_lost(int64_t campaign_id);

    Status add_build(const BuildRecord &build);
    Status add_verdict(const VerdictRecord &verdict);
    Status add_measurement(const MeasurementRecord &measurement);
    Status add_promotion(const PromotionRecord &promotion);
    Status add_note(const BoardNote &note);
    Status add_exchange(const ExchangeRecord &exchange);

    Result<std::vector<BuildRecord>> builds(int64_t candidate_id);
    Result<std::vector<VerdictRecord>> verdicts(int64_t candidate_id);
    Result<std::vector<MeasurementRecord>> measurements(int64_t candidate_id);
    // All measurements / verdicts of a campaign, oldest first (for reports and agents).
    Result<std::vector<MeasurementRecord>> campaign_measurements(int64_t campaign_id);
    Result<std::vector<VerdictRecord>> campaign_verdicts(int64_t campaign_id);
    Result<std::vector<PromotionRecord>> promotions(int64_t campaign_id);
    Result<std::vector<BoardNote>> notes(int64_t campaign_id, size_t limit = 100);
    // A campaign's llm exchanges, oldest first (all agents, or one).
    Result<std::vector<ExchangeRecord>> exchanges(int64_t campaign_id, const std::string &agent = "");

private:
    Store() = default;
    Status exec(const std::string &sql);
    Status enable_wal();
    Status migrate();
    // Inside migrate()'s transaction: applies the migration after the stored version; false when none is left.
    Result<bool> apply_next_migration();

    std::filesystem::path path_;
    sqlite3 *db_ = nullptr;
    std::mutex mutex_;
};

// Unix time in seconds.
double unix_seconds();

}  // namespace hp::store
