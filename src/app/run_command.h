#pragma once
// tdiff run: the candidate (a backend, or an external dump) on the case's inputs, every stage
// compared with /reference, judged, recorded and reported.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/history_record.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct RunCmd {
  std::string case_path;
  std::string stages;
  std::string selections = "replay";
  bool selections_given = false;  // on the command line: an engine (--candidate-cmd) is asked for that mode
  bool save = false;    // the candidate's tensors into /runs/<run-id> of the case
  std::string save_to;  // ... or of this HDF5 file
  bool stats = false;
  std::string dump, dump_group = "/";  // --candidate-dump: an external implementation's tensors
  std::string dump_policy;             // the formats it stores in, for the expected errors
  CandidateOptions cand;
  ReportOptions report;
  WeightCheckOptions weights;
  HistoryOptions history;  // --history, --label, --no-record
  bool as_prefill = false;  // a generation case as one prefill, not in its steps against a cache
  bool p_vs_d = false;      // also the candidate's steps against its own prefill (exec/prefill_vs_decode.h)
  int timed = 0;           // --timed N: forwards timed after the compared run (exec/timed_forward.h)
  // emu in the candidate's formats beside the run (exec/measured_floor.h): "on" or "off".
  std::string measured_floor = "on";
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_run(RunCmd c);

}  // namespace tdiff::app
