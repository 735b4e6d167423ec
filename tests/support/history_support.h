#pragma once
// What the run history beside a case holds (history/history_db.h), for tests that check a
// command's record.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "history/history_db.h"

namespace tdiff::testing {

// Every run recorded for `case_path`, oldest first (none when there is no history yet).
inline std::vector<history::RunEntry> recorded_runs(const std::string& case_path) {
  const std::string db = history::history_path_for(case_path);
  if (!std::filesystem::exists(db)) return {};
  const std::string abs = std::filesystem::absolute(case_path).lexically_normal().string();
  return history::HistoryDb(db, false).runs({abs, "", "", 0, true});
}

// The record of run `id` of the case, if there is one.
inline std::optional<history::RunEntry> recorded_run(const std::string& case_path, const std::string& id) {
  for (auto& e : recorded_runs(case_path))
    if (e.id == id) return e;
  return std::nullopt;
}

}  // namespace tdiff::testing
