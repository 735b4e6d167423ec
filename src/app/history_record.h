#pragma once
// --history, --label and --no-record of the commands that record (run, bisect, determinism,
// ci), and the record itself: opened before the work, so a command that cannot record fails
// before it computes; committed at the end into the case's run history (history/history_db.h).
// The case file is only read.
#include <memory>
#include <string>

#include "casefile/env_record.h"
#include "history/history_db.h"
#include "history/run_entry.h"

namespace tdiff::app {

struct HistoryOptions {
  std::string history;  // --history FILE (default: history::history_path_for)
  std::string label;    // --label: the series this run belongs to (a build, a branch, "baseline")
  bool no_record = false;
};

class HistoryRecord {
 public:
  HistoryRecord(const std::string& case_path, const HistoryOptions& o);
  bool enabled() const { return db_ != nullptr; }
  // The reference the verdict is about, as read (casefile/case_file.h reference_id): a case
  // whose reference another command recomputed meanwhile gets no record (InputError at commit).
  void judged_against(const std::string& reference_id) { reference_read_ = reference_id; }
  // An entry with what every record holds: ids, case, date, build, label, backend and policy
  // from `env` (complete it, then commit).
  history::RunEntry entry(const std::string& kind, const std::string& run_id, const EnvRecord& env) const;
  // Records `e` and says where on stdout; nothing with --no-record.
  void commit(const history::RunEntry& e);

 private:
  std::string case_path_, label_, reference_read_;
  std::unique_ptr<history::HistoryDb> db_;
};

}  // namespace tdiff::app
