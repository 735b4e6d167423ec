#pragma once
// The gate of the dual curve (`tdiff gate`, `tdiff ci --gate`): a candidate build passes
// against a baseline build on a case only when it is not less accurate and not slower, each
// beyond the noise:
//   - no tensor FAILs that passed in the baseline;
//   - no tensor's error, and neither the logits' KL nor their top-1 agreement, moves the wrong
//     way by more than the noise: the larger of the two builds' spreads over repeated runs and
//     `error_tolerance` of the baseline's value;
//   - an error that drops beyond the noise is flagged as well, and fails unless accepted: an
//     accuracy change nobody explained is a change (PyTorch's CI fails on those);
//   - the median timed forward is not slower than the baseline's beyond the larger of the two
//     spreads and `speed_tolerance`, and both speeds are verified (the timed outputs are the
//     compared run's, history/run_entry.h SpeedRecord): an unchecked speed is no speed.
// Figures are per build the median over its runs (history/series.h); the rule is kept apart
// from those statistics, as diff/thresholds.h keeps verdicts apart from metrics.
#include <string>
#include <vector>

#include "history/run_entry.h"

namespace tdiff::history {

struct GateOptions {
  std::string baseline, candidate;  // labels
  double error_tolerance = 0.05;    // relative
  double speed_tolerance = 0.05;    // relative
  bool speed = true;                // judge speed (false: accuracy only)
  bool accept_improvements = false;
};

enum class GateLevel { fail, flag, note };

struct GateFinding {
  GateLevel level = GateLevel::note;
  std::string what;    // "new FAIL", "error up", "slower", ...
  std::string detail;  // one line with the numbers
};

struct CaseGate {
  std::string case_name;
  int baseline_runs = 0, candidate_runs = 0;
  std::vector<GateFinding> findings;
  bool pass() const;
};

// One case's runs (every label; history/history_db.h RunQuery) judged.
CaseGate gate_case(const std::string& case_name, const std::vector<RunEntry>& runs, const GateOptions& o);

}  // namespace tdiff::history
