#pragma once
// tdiff ci: a golden prompt set (app/ci_suite.h), or an engine's dumps of it, judged case by case
// with one verdict, a table, junit.xml and index.html.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/history_record.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct CiCmd {
  std::string suite;
  std::string backend = "emu", policy = "fixed";
  std::string hip_gemm = "matrix";
  std::vector<std::string> sets;
  std::string thresholds;              // overrides the suite's file
  std::vector<std::string> overrides;  // --threshold
  std::string cases;                   // case-name globs
  int repeat = 0;                      // 0: the suite's
  std::string out_dir, cache_dir, run_id;
  bool rebuild = false;
  bool prepare = false;     // build the cache, list the cases' files, run nothing
  std::string dumps_dir;    // --candidate-dumps: an external implementation's <case>.h5 per case
  std::string dump_policy;  // --dump-policy: the formats those dumps store in ("" : the scaled rule)
  std::string candidate_cmd;  // --candidate-cmd: an engine tdiff runs on each case for those dumps
  std::string measured_floor = "on";  // "on" | "off", as `tdiff run --measured-floor`
  HistoryOptions history;             // each case's record (default: beside the cached case files)
  int timed = 0;                      // --timed N: each case's forwards timed, as `tdiff run --timed`
  std::string gate_baseline;          // --gate LABEL: after the run, `tdiff gate` of this run's label against it
  bool gate_speed = true;             // --gate-speed off: accuracy only
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_ci(CiCmd c);

}  // namespace tdiff::app
