// Plain records of the campaign store (one struct per table). Times are seconds: `created_at` is
// the Unix time a row was written, `elapsed_s` the campaign's own clock (which survives a resume).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hp::store {

struct CampaignRecord {
    int64_t id = 0;
    double created_at = 0;
    std::string model;
    std::string hardware;        // e.g. "cpu: AMD EPYC 9R14 x2"
    std::string traffic;         // what --traffic named
    int64_t profile_id = 0;      // traffic_profiles row
    std::string tiers;           // "fast,slow" or "slow"
    nlohmann::json budget;       // {"seconds": .., "candidates": ..}
    nlohmann::json options;      // everything else needed to resume
    std::string status;          // running | finished | failed
    std::string incumbent;       // candidate hash, or "baseline"
    std::string incumbent_artifact;
    double elapsed_s = 0;
};

struct CandidateRecord {
    int64_t id = 0;
    int64_t campaign_id = 0;
    std::string hash;         // xxh128 of the sources + knobs: the candidate's identity
    std::string parent;       // a candidate hash or an in-tree name ("baseline")
    std::string agent;
    nlohmann::json knobs = nlohmann::json::object();  // define -> value (string)
    std::string notes;
    std::string source_hash;  // objects/sources/<source_hash>/
    std::string state;        // queued | built | evaluating | promoted | evaluating_slow | done | lost
    double created_at = 0;
    double elapsed_s = 0;
};

struct BuildRecord {
    int64_t candidate_id = 0;
    std::string key;
    bool ok = false;
    bool cached = false;
    double seconds = 0;
    std::string failure;
    std::string diagnostics;
    std::string artifact;
};

struct VerdictRecord {
    int64_t candidate_id = 0;
    std::string tier;  // build | fast | slow | final
    std::string code;
    std::string reason;
    double hot_swap_s = 0;
    int executor_starts = 0;
    double elapsed_s = 0;
};

struct MeasurementRecord {
    int64_t candidate_id = 0;
    std::string tier;
    std::string incumbent;  // what the candidate was timed against
    double speedup = 1, ci_low = 1, ci_high = 1;
    bool significant = false;
    double incumbent_ms = 0, candidate_ms = 0;  // weighted medians
    nlohmann::json shapes = nlohmann::json::array();  // per-shape summaries (tune::measurement_to_json)
    double elapsed_s = 0;
};

struct PromotionRecord {
    int64_t campaign_id = 0;
    int64_t candidate_id = 0;
    std::string from_tier;  // fast -> slow, slow -> incumbent
    std::string to_tier;
    double speedup = 1;
    double elapsed_s = 0;
};

struct BoardNote {
    int64_t campaign_id = 0;
    std::string agent;
    std::string candidate;  // hash, may be empty
    std::string text;
    double elapsed_s = 0;
};

// One request to a chat endpoint by an llm agent and what came back (or why nothing did).
struct ExchangeRecord {
    int64_t campaign_id = 0;
    std::string agent;
    int turn = 0;
    std::string url;
    std::string model;
    std::string request;    // the JSON body sent (no credentials)
    std::string response;   // the body received, truncated
    int http_status = 0;    // 0: no HTTP reply (unreachable, timeout)
    std::string error;      // transport failure, rate limit, unparseable reply...; empty when the reply was used
    double latency_s = 0;
    int64_t prompt_tokens = 0, completion_tokens = 0;  // from the reply's usage, when given
    double elapsed_s = 0;
};

struct ProfileRecord {
    int64_t id = 0;
    std::string hash;
    std::string source;
    nlohmann::json profile;
    nlohmann::json workload;
};

}  // namespace hp::store
