#pragma once
// tdiff compare: two HDF5 dumps tensor by tensor (a saved run against its case as the run
// judged it: exec/saved_run.h), with verdicts and reports.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct CompareCmd {
  std::string file_a, file_b;
  std::string group_a, group_b;  // empty: "/reference" when the file has it, else "/"
  std::string stages;
  std::string thresholds;
  std::vector<std::string> overrides;
  std::string floor_file, floor_group;
  std::optional<double> floor_k;
  std::optional<double> rel_floor;
  std::string out_dir, case_name, run_id;
  bool all_rows = false, no_reports = false;
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_compare(CompareCmd c);

}  // namespace tdiff::app
