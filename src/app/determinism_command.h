#pragma once
// tdiff determinism: the candidate run several times (threads, seeds, batch slices), compared
// bit for bit, reported and recorded.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/history_record.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct DeterminismCmd {
  std::string case_path;
  CandidateOptions cand;  // backend may also be "refcpu" here
  bool seed_given = false;
  int runs = 3;
  std::vector<int> threads;
  std::vector<int> batch_sweep;
  std::string pad_side;  // left | right | both; empty: the case's side
  std::string stages;
  std::string out_dir, run_id;
  bool all_rows = false, no_reports = false;
  bool on_device = false;  // run to run compared on the backend's device (hip)
  std::vector<int> tp_sweep;            // --tp-sweep: tensor-parallel sizes (app/tp_sweep.h)
  std::vector<std::string> orders{"ring", "tree"};  // --orders: the all-reduce orders the sweep runs
  HistoryOptions history;
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_determinism(DeterminismCmd c);

}  // namespace tdiff::app
