#pragma once
// The run history: one SQLite file per case folder (or per golden set's cache), holding every
// recorded run, bisect, determinism check and ci case (history/run_entry.h). WAL journal and a
// busy timeout, each record one transaction: several tdiff processes may record into one file
// at once. Cases stay inputs and reference; records made by older versions inside a case file
// (/runs, /env) are read into the history the first time it sees that case (import_case).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "history/run_entry.h"

struct sqlite3;

namespace tdiff::history {

inline constexpr const char* kHistoryFile = "tdiff-history.sqlite";

// Where a case's history lives: `given` (--history), else $TDIFF_HISTORY, else
// tdiff-history.sqlite in the case's folder; for a golden set's cached case, in the root of the
// set's cache (one history over every version of the set: `tdiff ci` rebuilds the cached cases
// in a new folder when the set or tdiff changes).
std::string history_path_for(const std::string& case_path, const std::string& given = "");
// What makes runs "the same case" across builds: the file, or for a golden set's case its set
// and name (its cached file moves with each version of the set).
std::string series_key(const RunEntry& e);

struct RunQuery {
  std::string case_path;  // absolute; empty: every case
  std::string label;      // empty: every label
  std::string kind;       // empty: every kind
  std::size_t newest = 0;  // the newest N (0: all); returned oldest first either way
  bool details = true;     // stage rows and timings too
};

class HistoryDb {
 public:
  // Opens (creating when missing) the history at `path`. `create` false: a missing file is an
  // InputError (a reader has nothing to read). Any SQLite failure is an InputError naming the file.
  explicit HistoryDb(const std::string& path, bool create = true);
  ~HistoryDb();
  HistoryDb(const HistoryDb&) = delete;
  HistoryDb& operator=(const HistoryDb&) = delete;

  const std::string& path() const { return path_; }
  // Records `e` (an earlier record of the same id is replaced), in one transaction.
  void add(const RunEntry& e);
  std::vector<RunEntry> runs(const RunQuery& q) const;
  std::size_t count(const std::string& case_path = "") const;
  // Reads the records an older tdiff kept inside the case file into the history, once per
  // case file (by its absolute path); returns how many were read now.
  std::size_t import_case(const std::string& case_path);

 private:
  void exec(const std::string& sql) const;
  std::string why_failed() const;  // SQLite's message, with the system's where there is one
  void load_details(RunEntry& e) const;
  std::string path_;
  sqlite3* db_ = nullptr;
};

// The history of `case_path` opened for recording, checked at once so that a command fails
// before its work when it cannot record (a read-only folder: --history elsewhere).
std::unique_ptr<HistoryDb> open_for_recording(const std::string& case_path, const std::string& given);

}  // namespace tdiff::history
