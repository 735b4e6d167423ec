#pragma once
// tdiff bisect: which candidate stage makes the watched output fail (bisect/bisect.h), with the
// search trace printed as it runs, reports and the record in the case.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/history_record.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct BisectCmd {
  std::string case_path;
  CandidateOptions cand;
  ReportOptions report;
  HistoryOptions history;
  std::string watch = "logits";
  std::string floor = "fixed";
  std::string mode = "search";
  std::string suffix = "auto";
  bool attribute = false;
  std::string attribute_by = "class";
  std::size_t max_culprits = 8;
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_bisect(BisectCmd c);

}  // namespace tdiff::app
