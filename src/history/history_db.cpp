#include "history/history_db.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "history/legacy_import.h"

namespace tdiff::history {

namespace fs = std::filesystem;

namespace {

// Schema 1. `runs` one row a record; `stages` its compared tensors; `timings` its phases and,
// under "class:<op_class>", the profiled forward's seconds per stage class; `imported` the
// case files whose old in-file records were read.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO meta VALUES('schema', '1');
CREATE TABLE IF NOT EXISTS runs(
  id TEXT PRIMARY KEY, kind TEXT, case_path TEXT, case_name TEXT, suite TEXT, date_utc TEXT,
  label TEXT, build TEXT, backend TEXT, policy TEXT, selections TEXT, verdict TEXT,
  first_divergence TEXT, summary TEXT, report_path TEXT,
  logits_kl REAL, logits_top1 REAL, logits_top10 REAL,
  timed_repeats INTEGER, forward_s REAL, forward_spread_s REAL, tokens INTEGER, tokens_per_s REAL,
  outputs_sha256 TEXT, verified TEXT, env_json TEXT, attrs_json TEXT);
CREATE INDEX IF NOT EXISTS runs_by_case ON runs(case_path, date_utc);
CREATE TABLE IF NOT EXISTS stages(run_id TEXT, key TEXT, op_class TEXT, error REAL, expected REAL, ratio REAL,
  verdict TEXT, PRIMARY KEY(run_id, key));
CREATE TABLE IF NOT EXISTS timings(run_id TEXT, phase TEXT, seconds REAL, PRIMARY KEY(run_id, phase));
CREATE TABLE IF NOT EXISTS imported(case_path TEXT PRIMARY KEY, date_utc TEXT, runs INTEGER);
)sql";

constexpr const char* kRunColumns =
    "id, kind, case_path, case_name, suite, date_utc, label, build, backend, policy, selections, verdict, "
    "first_divergence, summary, report_path, logits_kl, logits_top1, logits_top10, timed_repeats, forward_s, "
    "forward_spread_s, tokens, tokens_per_s, outputs_sha256, verified, env_json, attrs_json";

// A prepared statement, finalized on every path out.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, double v) {  // NaN: NULL ("not measured")
    if (std::isnan(v)) sqlite3_bind_null(s_, i);
    else sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  bool step() {  // true: a row is there
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("step");
    return false;
  }
  void reset() {  // for the next row's bindings
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string text(int i) const {
    const auto* t = sqlite3_column_text(s_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double real(int i) const { return sqlite3_column_type(s_, i) == SQLITE_NULL ? kNone : sqlite3_column_double(s_, i); }
  std::int64_t integer(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  [[noreturn]] void fail(const char* what) const {
    input_error("run history {}: {} failed: {}", path_, what, sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  const std::string& path_;
};

std::string to_json(const std::map<std::string, std::string>& m) { return nlohmann::json(m).dump(); }

std::map<std::string, std::string> from_json(const std::string& text) {
  if (text.empty()) return {};
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : j.items())
    if (v.is_string()) m[k] = v.get<std::string>();
  return m;
}

void insert_run(sqlite3* db, const std::string& path, const RunEntry& e) {
  Statement s(db, fmt::format("INSERT OR REPLACE INTO runs({}) VALUES({})", kRunColumns,
                              "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?"),
              path);
  int i = 1;
  for (const std::string* v : {&e.id, &e.kind, &e.case_path, &e.case_name, &e.suite, &e.date_utc, &e.label, &e.build,
                               &e.backend, &e.policy, &e.selections, &e.verdict, &e.first_divergence, &e.summary,
                               &e.report_path})
    s.bind(i++, *v);
  const std::vector<double> reals = {e.logits_kl, e.logits_top1, e.logits_top10};
  for (double v : reals) s.bind(i++, v);
  s.bind(i++, std::int64_t{e.speed.repeats});
  s.bind(i++, e.speed.forward_s);
  s.bind(i++, e.speed.spread_s);
  s.bind(i++, e.speed.tokens);
  s.bind(i++, e.speed.tokens_per_s);
  s.bind(i++, e.speed.outputs_sha256);
  s.bind(i++, e.speed.verified);
  s.bind(i++, to_json(e.env.to_attrs()));
  s.bind(i++, to_json(e.attrs));
  s.step();
}

void insert_details(sqlite3* db, const std::string& path, const RunEntry& e) {
  for (const char* table : {"stages", "timings"}) {
    Statement del(db, fmt::format("DELETE FROM {} WHERE run_id = ?", table), path);
    del.bind(1, e.id).step();
  }
  Statement st(db, "INSERT OR REPLACE INTO stages VALUES(?,?,?,?,?,?,?)", path);
  for (const StageRecord& r : e.stages) {
    st.bind(1, e.id).bind(2, r.key).bind(3, r.op_class).bind(4, r.error).bind(5, r.expected).bind(6, r.ratio);
    st.bind(7, r.verdict).step();
    st.reset();
  }
  auto timing = [&](const std::string& phase, double seconds) {
    Statement t(db, "INSERT OR REPLACE INTO timings VALUES(?,?,?)", path);
    t.bind(1, e.id).bind(2, phase).bind(3, seconds).step();
  };
  for (const auto& [phase, seconds] : e.timings) timing(phase, seconds);
  for (const auto& [cls, seconds] : e.speed.class_seconds) timing("class:" + cls, seconds);
}

RunEntry read_run(const Statement& s) {
  RunEntry e;
  int i = 0;
  for (std::string* v : {&e.id, &e.kind, &e.case_path, &e.case_name, &e.suite, &e.date_utc, &e.label, &e.build,
                         &e.backend, &e.policy, &e.selections, &e.verdict, &e.first_divergence, &e.summary,
                         &e.report_path})
    *v = s.text(i++);
  e.logits_kl = s.real(i++);
  e.logits_top1 = s.real(i++);
  e.logits_top10 = s.real(i++);
  e.speed.repeats = static_cast<int>(s.integer(i++));
  e.speed.forward_s = s.real(i++);
  e.speed.spread_s = s.real(i++);
  e.speed.tokens = s.integer(i++);
  e.speed.tokens_per_s = s.real(i++);
  e.speed.outputs_sha256 = s.text(i++);
  e.speed.verified = s.text(i++);
  e.env = EnvRecord::from_attrs(from_json(s.text(i++)));
  e.attrs = from_json(s.text(i++));
  return e;
}

}  // namespace

std::string history_path_for(const std::string& case_path, const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("TDIFF_HISTORY"); env && *env) return env;
  const fs::path dir = fs::absolute(case_path).lexically_normal().parent_path();
  // A golden set's cached case (its "<case>.done" marker beside it) lives in one version of the
  // set's cache; the set's history spans the versions, in the cache's root.
  if (std::error_code ec; fs::is_regular_file(fs::absolute(case_path).string() + ".done", ec))
    return (dir.parent_path() / kHistoryFile).string();
  return (dir / kHistoryFile).string();
}

std::string series_key(const RunEntry& e) { return e.suite.empty() ? e.case_path : e.suite + "/" + e.case_name; }

HistoryDb::HistoryDb(const std::string& path, bool create) : path_(path) {
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (!create && !existed)
    input_error("run history {}: no such file (runs are recorded there by tdiff run, bisect, determinism and ci)", path);
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
  try {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK)
      input_error("run history {}: cannot open it ({}); --history FILE records elsewhere", path, why_failed());
    sqlite3_busy_timeout(db_, 60000);  // another process's transaction: wait for it, not fail
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec(kSchema);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    if (!existed)  // what this call made, gone again: no half-made history
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
    throw;
  }
}

std::string HistoryDb::why_failed() const {
  if (!db_) return "out of memory";
  std::string why = sqlite3_errmsg(db_);
  if (const int e = sqlite3_system_errno(db_); e != 0) why += std::string(": ") + std::strerror(e);
  return why;
}

HistoryDb::~HistoryDb() { sqlite3_close(db_); }

void HistoryDb::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    if (const int e = sqlite3_system_errno(db_); e != 0) why += std::string(": ") + std::strerror(e);
    input_error("run history {}: {} (is it a tdiff run history?)", path_, why);
  }
}

void HistoryDb::add(const RunEntry& e) {
  exec("BEGIN IMMEDIATE");  // takes the write lock now, waiting out other writers
  try {
    insert_run(db_, path_, e);
    insert_details(db_, path_, e);
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void HistoryDb::load_details(RunEntry& e) const {
  Statement s(db_, "SELECT key, op_class, error, expected, ratio, verdict FROM stages WHERE run_id = ? ORDER BY rowid",
              path_);
  s.bind(1, e.id);
  while (s.step()) e.stages.push_back({s.text(0), s.text(1), s.real(2), s.real(3), s.real(4), s.text(5)});
  Statement t(db_, "SELECT phase, seconds FROM timings WHERE run_id = ? ORDER BY rowid", path_);
  t.bind(1, e.id);
  while (t.step()) {
    const std::string phase = t.text(0);
    if (phase.rfind("class:", 0) == 0) e.speed.class_seconds[phase.substr(6)] = t.real(1);
    else e.timings.emplace_back(phase, t.real(1));
  }
}

std::vector<RunEntry> HistoryDb::runs(const RunQuery& q) const {
  std::string sql = fmt::format("SELECT {} FROM runs WHERE (?1 = '' OR case_path = ?1) AND (?2 = '' OR label = ?2) "
                                "AND (?3 = '' OR kind = ?3) ORDER BY date_utc DESC, rowid DESC",
                                kRunColumns);
  if (q.newest > 0) sql += fmt::format(" LIMIT {}", q.newest);
  Statement s(db_, sql, path_);
  s.bind(1, q.case_path).bind(2, q.label).bind(3, q.kind);
  std::vector<RunEntry> out;
  while (s.step()) out.push_back(read_run(s));
  std::reverse(out.begin(), out.end());
  if (q.details)
    for (auto& e : out) load_details(e);
  return out;
}

std::size_t HistoryDb::count(const std::string& case_path) const {
  Statement s(db_, "SELECT COUNT(*) FROM runs WHERE ?1 = '' OR case_path = ?1", path_);
  s.bind(1, case_path);
  s.step();
  return static_cast<std::size_t>(s.integer(0));
}

std::size_t HistoryDb::import_case(const std::string& case_path) {
  const std::string abs = fs::absolute(case_path).lexically_normal().string();
  {
    Statement s(db_, "SELECT 1 FROM imported WHERE case_path = ?", path_);
    s.bind(1, abs);
    if (s.step()) return 0;
  }
  const std::vector<RunEntry> old = read_case_records(abs);  // before the lock: an HDF5 read
  exec("BEGIN IMMEDIATE");
  try {
    Statement again(db_, "SELECT 1 FROM imported WHERE case_path = ?", path_);  // another process may have
    again.bind(1, abs);
    if (again.step()) {
      exec("COMMIT");
      return 0;
    }
    for (const RunEntry& e : old) {
      insert_run(db_, path_, e);
      insert_details(db_, path_, e);
    }
    Statement mark(db_, "INSERT INTO imported VALUES(?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), ?)", path_);
    mark.bind(1, abs).bind(2, static_cast<std::int64_t>(old.size())).step();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return old.size();
}

std::unique_ptr<HistoryDb> open_for_recording(const std::string& case_path, const std::string& given) {
  const std::string path = history_path_for(case_path, given);
  // A history still to be made: its folder must take it (SQLite's own error names another cause).
  if (std::error_code ec; !fs::exists(path, ec)) {
    const fs::path dir = fs::absolute(path).parent_path();
    if (::access(dir.c_str(), W_OK) != 0)
      input_error("run history {}: cannot create it in {} ({}); --history FILE records elsewhere, --no-record nowhere",
                  path, dir.string(), std::strerror(errno));
  }
  auto db = std::make_unique<HistoryDb>(path);
  db->import_case(case_path);
  return db;
}

}  // namespace tdiff::history
