#include "app/history_record.h"

#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/case_file.h"

namespace tdiff::app {

HistoryRecord::HistoryRecord(const std::string& case_path, const HistoryOptions& o)
    : case_path_(std::filesystem::absolute(case_path).lexically_normal().string()), label_(o.label) {
  if (o.no_record) return;
  db_ = history::open_for_recording(case_path_, o.history);
}

history::RunEntry HistoryRecord::entry(const std::string& kind, const std::string& run_id, const EnvRecord& env) const {
  history::RunEntry e;
  e.id = run_id;
  e.kind = kind;
  e.case_path = case_path_;
  e.case_name = std::filesystem::path(case_path_).stem().string();
  e.date_utc = env.date_utc;
  e.backend = env.backend;
  e.policy = env.policy;
  e.env = env;
  e.build = history::build_of(env);
  e.label = label_.empty() ? history::default_label(e) : label_;
  return e;
}

void HistoryRecord::commit(const history::RunEntry& e) {
  if (!db_) return;
  if (const std::string now = reference_id(case_path_); !reference_read_.empty() && now != reference_read_)
    input_error("{}: its reference was recomputed by another command meanwhile (golden {} replaced {}): the result "
                "above is against the old reference and is not recorded in the run history (run the command again "
                "to record it)",
                case_path_, now, reference_read_);
  history::RunEntry with_label = e;
  if (with_label.label.empty()) with_label.label = history::default_label(with_label);
  db_->add(with_label);
  fmt::print("recorded    {} {} in {} (label \"{}\")\n", e.kind, e.id, db_->path(), with_label.label);
}

}  // namespace tdiff::app
