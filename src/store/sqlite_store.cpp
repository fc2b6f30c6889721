// SQLite implementation of the campaign store. Schema changes are append-only migrations: each
// entry of kMigrations moves the database from version i to i+1 inside one transaction, and
// schema_migrations records which ran. JSON columns hold nlohmann::json dumps.
#include "hotpass/store/store.h"

#include <sqlite3.h>

#include <chrono>
#include <functional>
#include <thread>

#include "hotpass/core/json_text.h"

namespace hp::store {

using nlohmann::json;

namespace {

const char *const kMigrations[] = {
    // v1
    R"sql(
CREATE TABLE traffic_profiles (
  id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, source TEXT NOT NULL,
  profile_json TEXT NOT NULL, workload_json TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE campaigns (
  id INTEGER PRIMARY KEY, created_at REAL NOT NULL, model TEXT NOT NULL, hardware TEXT NOT NULL,
  traffic TEXT NOT NULL, profile_id INTEGER REFERENCES traffic_profiles(id), tiers TEXT NOT NULL,
  budget_json TEXT NOT NULL, options_json TEXT NOT NULL, status TEXT NOT NULL,
  incumbent TEXT NOT NULL, incumbent_artifact TEXT NOT NULL, elapsed_s REAL NOT NULL DEFAULT 0);
CREATE TABLE candidates (
  id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL REFERENCES campaigns(id), hash TEXT NOT NULL,
  parent TEXT NOT NULL, agent TEXT NOT NULL, knobs_json TEXT NOT NULL, notes TEXT NOT NULL,
  source_hash TEXT NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL, elapsed_s REAL NOT NULL,
  UNIQUE (campaign_id, hash));
CREATE INDEX candidates_by_hash ON candidates(hash);
CREATE TABLE builds (
  id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id), key TEXT NOT NULL,
  ok INTEGER NOT NULL, cached INTEGER NOT NULL, seconds REAL NOT NULL, failure TEXT NOT NULL,
  diagnostics TEXT NOT NULL, artifact TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE verdicts (
  id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id), tier TEXT NOT NULL,
  code TEXT NOT NULL, reason TEXT NOT NULL, hot_swap_s REAL NOT NULL, executor_starts INTEGER NOT NULL,
  elapsed_s REAL NOT NULL, created_at REAL NOT NULL);
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id), tier TEXT NOT NULL,
  incumbent TEXT NOT NULL, speedup REAL NOT NULL, ci_low REAL NOT NULL, ci_high REAL NOT NULL,
  significant INTEGER NOT NULL, incumbent_ms REAL NOT NULL, candidate_ms REAL NOT NULL,
  shapes_json TEXT NOT NULL, elapsed_s REAL NOT NULL, created_at REAL NOT NULL);
CREATE TABLE promotions (
  id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  candidate_id INTEGER NOT NULL REFERENCES candidates(id), from_tier TEXT NOT NULL, to_tier TEXT NOT NULL,
  speedup REAL NOT NULL, elapsed_s REAL NOT NULL, created_at REAL NOT NULL);
CREATE TABLE board_notes (
  id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL REFERENCES campaigns(id), agent TEXT NOT NULL,
  candidate TEXT NOT NULL, text TEXT NOT NULL, elapsed_s REAL NOT NULL, created_at REAL NOT NULL);
)sql",
    // v2: every request an llm agent sends to its chat endpoint, and the reply.
    R"sql(
CREATE TABLE llm_exchanges (
  id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL REFERENCES campaigns(id), agent TEXT NOT NULL,
  turn INTEGER NOT NULL, url TEXT NOT NULL, model TEXT NOT NULL, request_json TEXT NOT NULL,
  response TEXT NOT NULL, http_status INTEGER NOT NULL, error TEXT NOT NULL, latency_s REAL NOT NULL,
  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, elapsed_s REAL NOT NULL,
  created_at REAL NOT NULL);
CREATE INDEX llm_exchanges_by_campaign ON llm_exchanges(campaign_id, agent);
)sql",
};

// A prepared statement with positional binding and typed column reads.
class Statement {
public:
    Statement(sqlite3 *db, const std::string &sql) : db_(db) {
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) error_ = sqlite3_errmsg(db);
    }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement &bind(int64_t value) { return check(sqlite3_bind_int64(stmt_, ++n_bound_, value)); }
    Statement &bind(int value) { return bind(int64_t(value)); }
    Statement &bind(bool value) { return bind(int64_t(value)); }
    Statement &bind(double value) { return check(sqlite3_bind_double(stmt_, ++n_bound_, value)); }
    Statement &bind(const std::string &value) {
        return check(sqlite3_bind_text(stmt_, ++n_bound_, value.data(), int(value.size()), SQLITE_TRANSIENT));
    }
    Statement &bind(const json &value) { return bind(json_text(value)); }
    Statement &bind_null() { return check(sqlite3_bind_null(stmt_, ++n_bound_)); }
    // SQLITE_ROW: true; SQLITE_DONE: false; anything else: the error is kept.
    bool step() {
        if (!error_.empty()) return false;
        const int code = sqlite3_step(stmt_);
        if (code == SQLITE_ROW) return true;
        if (code != SQLITE_DONE) error_ = sqlite3_errmsg(db_);
        return false;
    }
    Status run() {
        while (step()) {
        }
        return status();
    }
    Status status() const { return error_.empty() ? Status() : Status(Error{error_}); }
    int64_t integer(int column) const { return sqlite3_column_int64(stmt_, column); }
    double real(int column) const { return sqlite3_column_double(stmt_, column); }
    std::string text(int column) const {
        const auto *data = reinterpret_cast<const char *>(sqlite3_column_text(stmt_, column));
        return data ? std::string(data, size_t(sqlite3_column_bytes(stmt_, column))) : std::string();
    }
    json json_column(int column) const {
        json value = json::parse(text(column), nullptr, false);
        return value.is_discarded() ? json() : value;
    }

private:
    Statement &check(int code) {
        if (code != SQLITE_OK && error_.empty()) error_ = sqlite3_errmsg(db_);
        return *this;
    }
    sqlite3 *db_;
    sqlite3_stmt *stmt_ = nullptr;
    int n_bound_ = 0;
    std::string error_;
};

template <typename T>
Result<std::vector<T>> collect(Statement &statement, const std::function<T(const Statement &)> &read) {
    std::vector<T> rows;
    while (statement.step()) rows.push_back(read(statement));
    if (Status status = statement.status(); !status.ok()) return Error{status.error()};
    return rows;
}

const char *kCampaignColumns =
    "id, created_at, model, hardware, traffic, profile_id, tiers, budget_json, options_json, status, incumbent, "
    "incumbent_artifact, elapsed_s";
CampaignRecord read_campaign(const Statement &s) {
    CampaignRecord c;
    c.id = s.integer(0);
    c.created_at = s.real(1);
    c.model = s.text(2);
    c.hardware = s.text(3);
    c.traffic = s.text(4);
    c.profile_id = s.integer(5);
    c.tiers = s.text(6);
    c.budget = s.json_column(7);
    c.options = s.json_column(8);
    c.status = s.text(9);
    c.incumbent = s.text(10);
    c.incumbent_artifact = s.text(11);
    c.elapsed_s = s.real(12);
    return c;
}

const char *kCandidateColumns = "id, campaign_id, hash, parent, agent, knobs_json, notes, source_hash, state, created_at, elapsed_s";
CandidateRecord read_candidate(const Statement &s) {
    CandidateRecord c;
    c.id = s.integer(0);
    c.campaign_id = s.integer(1);
    c.hash = s.text(2);
    c.parent = s.text(3);
    c.agent = s.text(4);
    c.knobs = s.json_column(5);
    c.notes = s.text(6);
    c.source_hash = s.text(7);
    c.state = s.text(8);
    c.created_at = s.real(9);
    c.elapsed_s = s.real(10);
    return c;
}

const char *kMeasurementColumns =
    "candidate_id, tier, incumbent, speedup, ci_low, ci_high, significant, incumbent_ms, candidate_ms, shapes_json, elapsed_s";
MeasurementRecord read_measurement(const Statement &s) {
    MeasurementRecord m;
    m.candidate_id = s.integer(0);
    m.tier = s.text(1);
    m.incumbent = s.text(2);
    m.speedup = s.real(3);
    m.ci_low = s.real(4);
    m.ci_high = s.real(5);
    m.significant = s.integer(6) != 0;
    m.incumbent_ms = s.real(7);
    m.candidate_ms = s.real(8);
    m.shapes = s.json_column(9);
    m.elapsed_s = s.real(10);
    return m;
}

const char *kVerdictColumns = "candidate_id, tier, code, reason, hot_swap_s, executor_starts, elapsed_s";
VerdictRecord read_verdict(const Statement &s) {
    return {s.integer(0), s.text(1), s.text(2), s.text(3), s.real(4), int(s.integer(5)), s.real(6)};
}

}  // namespace

// How long a connection waits for another one's lock (hotpass show, a resumed campaign) before failing.
constexpr std::chrono::milliseconds kBusyTimeout{10000};

double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path &path) {
    std::error_code code;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), code);
    std::unique_ptr<Store> store(new Store());
    store->path_ = std::filesystem::absolute(path);  // objects/ and artifacts/ are found beside it
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path.c_str(), &store->db_, flags, nullptr) != SQLITE_OK) {
        return error("cannot open the store {}: {}", path.string(), store->db_ ? sqlite3_errmsg(store->db_) : "out of memory");
    }
    sqlite3_busy_timeout(store->db_, int(kBusyTimeout.count()));  // other processes (hotpass show, a resumed campaign) may hold the lock briefly
    if (Status status = store->enable_wal(); !status.ok()) return error("{}: cannot enable WAL: {}", path.string(), status.error());
    // NORMAL in WAL mode: a commit survives a process kill (not necessarily a power cut).
    HP_TRY(store->exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"));
    if (Status status = store->migrate(); !status.ok()) return error("{}: {}", path.string(), status.error());
    return store;
}

Store::~Store() {
    if (db_) sqlite3_close(db_);
}

Status Store::exec(const std::string &sql) {
    char *message = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
        std::string text = message ? message : "unknown error";
        sqlite3_free(message);
        return error("{}", text);
    }
    return {};
}

// Switching a fresh file to WAL needs an exclusive lock, and SQLite answers SQLITE_BUSY at once,
// without calling the busy handler, while another connection is opening the same file; so wait
// here as the busy timeout would. A file already in WAL mode answers without any lock.
Status Store::enable_wal() {
    const auto deadline = std::chrono::steady_clock::now() + kBusyTimeout;
    for (;;) {
        Statement wal(db_, "PRAGMA journal_mode=WAL");
        const std::string mode = wal.step() ? wal.text(0) : "";
        if (wal.status().ok()) {
            if (mode == "wal") return {};
            return error("the journal mode stayed '{}'", mode);
        }
        const int code = sqlite3_errcode(db_);
        if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || std::chrono::steady_clock::now() > deadline) {
            return Error{wal.status().error()};
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

Status Store::migrate() {
    std::lock_guard lock(mutex_);
    HP_TRY(exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"));
    // One transaction per migration, the version read inside it: another connection opening the
    // same store at the same moment may have applied the migration this one was about to.
    for (;;) {
        HP_TRY(exec("BEGIN IMMEDIATE"));
        Result<bool> applied = apply_next_migration();
        if (!applied.ok()) {
            (void)exec("ROLLBACK");
            return Error{applied.error()};
        }
        HP_TRY(exec("COMMIT"));
        if (!*applied) return {};
    }
}

Result<bool> Store::apply_next_migration() {
    constexpr int n_migration = int(sizeof(kMigrations) / sizeof(kMigrations[0]));
    static_assert(n_migration == kSchemaVersion, "one migration per schema version");
    int version = 0;
    {
        Statement current(db_, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
        version = current.step() ? int(current.integer(0)) : 0;
        HP_TRY(current.status());
    }  // finalized before the transaction ends
    if (version > n_migration) return error("schema version {} is newer than this hotpass understands ({})", version, n_migration);
    if (version == n_migration) return false;
    Status applied = exec(kMigrations[version]);
    if (applied.ok()) {
        applied = Statement(db_, "INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)").bind(version + 1).bind(unix_seconds()).run();
    }
    if (!applied.ok()) return error("migration to schema version {} failed: {}", version + 1, applied.error());
    return true;
}

Result<int> Store::schema_version() {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    const int version = s.step() ? int(s.integer(0)) : 0;
    HP_TRY(s.status());
    return version;
}

Result<std::string> Store::journal_mode() {
    std::lock_guard lock(mutex_);
    Statement s(db_, "PRAGMA journal_mode");
    std::string mode = s.step() ? s.text(0) : "";
    HP_TRY(s.status());
    return mode;
}

Result<int64_t> Store::add_campaign(const CampaignRecord &c) {
    std::lock_guard lock(mutex_);
    Statement s(db_,
                "INSERT INTO campaigns(created_at, model, hardware, traffic, profile_id, tiers, budget_json, options_json, "
                "status, incumbent, incumbent_artifact, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
    s.bind(c.created_at ? c.created_at : unix_seconds()).bind(c.model).bind(c.hardware).bind(c.traffic);
    if (c.profile_id) s.bind(c.profile_id);
    else s.bind_null();
    s.bind(c.tiers).bind(c.budget).bind(c.options).bind(c.status.empty() ? std::string("running") : c.status).bind(c.incumbent)
        .bind(c.incumbent_artifact).bind(c.elapsed_s);
    HP_TRY(s.run());
    return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<CampaignRecord> Store::campaign(int64_t id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM campaigns WHERE id = ?", kCampaignColumns));
    s.bind(id);
    if (s.step()) return read_campaign(s);
    HP_TRY(s.status());
    return error("no campaign {} in {}", id, path_.string());
}

Result<std::vector<CampaignRecord>> Store::campaigns() {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM campaigns ORDER BY id", kCampaignColumns));
    return collect<CampaignRecord>(s, read_campaign);
}

Status Store::set_campaign_status(int64_t id, const std::string &status) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "UPDATE campaigns SET status = ? WHERE id = ?").bind(status).bind(id).run();
}

Status Store::set_incumbent(int64_t id, const std::string &hash, const std::string &artifact) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "UPDATE campaigns SET incumbent = ?, incumbent_artifact = ? WHERE id = ?").bind(hash).bind(artifact).bind(id).run();
}

Status Store::set_elapsed(int64_t id, double elapsed_s) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "UPDATE campaigns SET elapsed_s = ? WHERE id = ?").bind(elapsed_s).bind(id).run();
}

Result<int64_t> Store::add_profile(const ProfileRecord &p) {
    std::lock_guard lock(mutex_);
    Statement find(db_, "SELECT id FROM traffic_profiles WHERE hash = ?");
    find.bind(p.hash);
    if (find.step()) return find.integer(0);
    HP_TRY(find.status());
    HP_TRY(Statement(db_, "INSERT INTO traffic_profiles(hash, source, profile_json, workload_json, created_at) VALUES (?,?,?,?,?)")
               .bind(p.hash).bind(p.source).bind(p.profile).bind(p.workload).bind(unix_seconds()).run());
    return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<ProfileRecord> Store::profile(int64_t id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT id, hash, source, profile_json, workload_json FROM traffic_profiles WHERE id = ?");
    s.bind(id);
    if (s.step()) return ProfileRecord{s.integer(0), s.text(1), s.text(2), s.json_column(3), s.json_column(4)};
    HP_TRY(s.status());
    return error("no traffic profile {}", id);
}

Result<std::optional<int64_t>> Store::add_candidate(const CandidateRecord &c) {
    std::lock_guard lock(mutex_);
    Statement s(db_,
                "INSERT OR IGNORE INTO candidates(campaign_id, hash, parent, agent, knobs_json, notes, source_hash, state, "
                "created_at, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?)");
    s.bind(c.campaign_id).bind(c.hash).bind(c.parent).bind(c.agent).bind(c.knobs).bind(c.notes).bind(c.source_hash)
        .bind(c.state.empty() ? std::string("queued") : c.state).bind(c.created_at ? c.created_at : unix_seconds()).bind(c.elapsed_s);
    HP_TRY(s.run());
    if (sqlite3_changes(db_) == 0) return std::optional<int64_t>();
    return std::optional<int64_t>(sqlite3_last_insert_rowid(db_));
}

Status Store::set_candidate_state(int64_t id, const std::string &state) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "UPDATE candidates SET state = ? WHERE id = ?").bind(state).bind(id).run();
}

Result<CandidateRecord> Store::candidate(int64_t id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM candidates WHERE id = ?", kCandidateColumns));
    s.bind(id);
    if (s.step()) return read_candidate(s);
    HP_TRY(s.status());
    return error("no candidate {}", id);
}

Result<std::vector<CandidateRecord>> Store::candidates(int64_t campaign_id, const std::string &state) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM candidates WHERE campaign_id = ? AND (? = '' OR state = ?) ORDER BY id",
                                 kCandidateColumns));
    s.bind(campaign_id).bind(state).bind(state);
    return collect<CandidateRecord>(s, read_candidate);
}

Result<std::vector<CandidateRecord>> Store::find_candidates(const std::string &prefix) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM candidates WHERE substr(hash, 1, length(?)) = ? ORDER BY id", kCandidateColumns));
    s.bind(prefix).bind(prefix);
    return collect<CandidateRecord>(s, read_candidate);
}

Result<int64_t> Store::count_candidates(int64_t campaign_id, const std::string &state) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT COUNT(*) FROM candidates WHERE campaign_id = ? AND (? = '' OR state = ?)");
    s.bind(campaign_id).bind(state).bind(state);
    const int64_t n = s.step() ? s.integer(0) : 0;
    HP_TRY(s.status());
    return n;
}

Result<int> Store::mark_in_flight_lost(int64_t campaign_id) {
    std::lock_guard lock(mutex_);
    HP_TRY(Statement(db_, "UPDATE candidates SET state = 'lost' WHERE campaign_id = ? AND state IN ('evaluating', 'evaluating_slow')")
               .bind(campaign_id).run());
    return sqlite3_changes(db_);
}

Status Store::add_build(const BuildRecord &b) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO builds(candidate_id, key, ok, cached, seconds, failure, diagnostics, artifact, created_at) "
                          "VALUES (?,?,?,?,?,?,?,?,?)")
        .bind(b.candidate_id).bind(b.key).bind(b.ok).bind(b.cached).bind(b.seconds).bind(b.failure).bind(b.diagnostics)
        .bind(b.artifact).bind(unix_seconds()).run();
}

Status Store::add_verdict(const VerdictRecord &v) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO verdicts(candidate_id, tier, code, reason, hot_swap_s, executor_starts, elapsed_s, created_at) "
                          "VALUES (?,?,?,?,?,?,?,?)")
        .bind(v.candidate_id).bind(v.tier).bind(v.code).bind(v.reason).bind(v.hot_swap_s).bind(v.executor_starts).bind(v.elapsed_s)
        .bind(unix_seconds()).run();
}

Status Store::add_measurement(const MeasurementRecord &m) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO measurements(candidate_id, tier, incumbent, speedup, ci_low, ci_high, significant, "
                          "incumbent_ms, candidate_ms, shapes_json, elapsed_s, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")
        .bind(m.candidate_id).bind(m.tier).bind(m.incumbent).bind(m.speedup).bind(m.ci_low).bind(m.ci_high).bind(m.significant)
        .bind(m.incumbent_ms).bind(m.candidate_ms).bind(m.shapes).bind(m.elapsed_s).bind(unix_seconds()).run();
}

Status Store::add_promotion(const PromotionRecord &p) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO promotions(campaign_id, candidate_id, from_tier, to_tier, speedup, elapsed_s, created_at) "
                          "VALUES (?,?,?,?,?,?,?)")
        .bind(p.campaign_id).bind(p.candidate_id).bind(p.from_tier).bind(p.to_tier).bind(p.speedup).bind(p.elapsed_s)
        .bind(unix_seconds()).run();
}

Status Store::add_note(const BoardNote &n) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO board_notes(campaign_id, agent, candidate, text, elapsed_s, created_at) VALUES (?,?,?,?,?,?)")
        .bind(n.campaign_id).bind(n.agent).bind(n.candidate).bind(n.text).bind(n.elapsed_s).bind(unix_seconds()).run();
}

Status Store::add_exchange(const ExchangeRecord &e) {
    std::lock_guard lock(mutex_);
    return Statement(db_, "INSERT INTO llm_exchanges(campaign_id, agent, turn, url, model, request_json, response, http_status, error, "
                          "latency_s, prompt_tokens, completion_tokens, elapsed_s, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
        .bind(e.campaign_id).bind(e.agent).bind(e.turn).bind(e.url).bind(e.model).bind(e.request).bind(e.response).bind(e.http_status)
        .bind(e.error).bind(e.latency_s).bind(e.prompt_tokens).bind(e.completion_tokens).bind(e.elapsed_s).bind(unix_seconds()).run();
}

Result<std::vector<BuildRecord>> Store::builds(int64_t candidate_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT candidate_id, key, ok, cached, seconds, failure, diagnostics, artifact FROM builds WHERE candidate_id = ? ORDER BY id");
    s.bind(candidate_id);
    return collect<BuildRecord>(s, [](const Statement &r) {
        return BuildRecord{r.integer(0), r.text(1), r.integer(2) != 0, r.integer(3) != 0, r.real(4), r.text(5), r.text(6), r.text(7)};
    });
}

Result<std::vector<VerdictRecord>> Store::verdicts(int64_t candidate_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM verdicts WHERE candidate_id = ? ORDER BY id", kVerdictColumns));
    s.bind(candidate_id);
    return collect<VerdictRecord>(s, read_verdict);
}

Result<std::vector<MeasurementRecord>> Store::measurements(int64_t candidate_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM measurements WHERE candidate_id = ? ORDER BY id", kMeasurementColumns));
    s.bind(candidate_id);
    return collect<MeasurementRecord>(s, read_measurement);
}

Result<std::vector<MeasurementRecord>> Store::campaign_measurements(int64_t campaign_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, fmt::format("SELECT {} FROM measurements WHERE candidate_id IN "
                                 "(SELECT id FROM candidates WHERE campaign_id = ?) ORDER BY id",
                                 kMeasurementColumns));
    s.bind(campaign_id);
    return collect<MeasurementRecord>(s, read_measurement);
}

Result<std::vector<VerdictRecord>> Store::campaign_verdicts(int64_t campaign_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT v.candidate_id, v.tier, v.code, v.reason, v.hot_swap_s, v.executor_starts, v.elapsed_s FROM verdicts v "
                     "JOIN candidates c ON c.id = v.candidate_id WHERE c.campaign_id = ? ORDER BY v.id");
    s.bind(campaign_id);
    return collect<VerdictRecord>(s, read_verdict);
}

Result<std::vector<PromotionRecord>> Store::promotions(int64_t campaign_id) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT campaign_id, candidate_id, from_tier, to_tier, speedup, elapsed_s FROM promotions WHERE campaign_id = ? ORDER BY id");
    s.bind(campaign_id);
    return collect<PromotionRecord>(s, [](const Statement &r) {
        return PromotionRecord{r.integer(0), r.integer(1), r.text(2), r.text(3), r.real(4), r.real(5)};
    });
}

Result<std::vector<BoardNote>> Store::notes(int64_t campaign_id, size_t limit) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT campaign_id, agent, candidate, text, elapsed_s FROM "
                     "(SELECT * FROM board_notes WHERE campaign_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id");
    s.bind(campaign_id).bind(int64_t(limit));
    return collect<BoardNote>(s, [](const Statement &r) { return BoardNote{r.integer(0), r.text(1), r.text(2), r.text(3), r.real(4)}; });
}

Result<std::vector<ExchangeRecord>> Store::exchanges(int64_t campaign_id, const std::string &agent) {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT campaign_id, agent, turn, url, model, request_json, response, http_status, error, latency_s, prompt_tokens, "
                     "completion_tokens, elapsed_s FROM llm_exchanges WHERE campaign_id = ? AND (? = '' OR agent = ?) ORDER BY id");
    s.bind(campaign_id).bind(agent).bind(agent);
    return collect<ExchangeRecord>(s, [](const Statement &r) {
        return ExchangeRecord{r.integer(0), r.text(1), int(r.integer(2)), r.text(3), r.text(4), r.text(5), r.text(6),
                              int(r.integer(7)), r.text(8), r.real(9), r.integer(10), r.integer(11), r.real(12)};
    });
}

}  // namespace hp::store
