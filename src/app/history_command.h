#pragma once
// tdiff history and tdiff gate: the run history of a case or a golden set read back as series
// over builds (history/series.h), printed, drawn (report/history_html.h) and gated
// (history/gate.h).
#include <string>

#include "history/gate.h"

namespace tdiff::app {

struct HistoryCmd {
  std::string target;   // a case file, a golden set's folder, or a folder holding a history
  std::string history;  // --history FILE
  std::string label;    // only this label
  std::string kind;     // only this kind (run, ci, bisect, determinism)
  std::string html;     // --html FILE
  double noise = 0.05;  // --noise: the least relative change that is a step
  bool runs = false;    // list the runs, not only the builds
};

struct GateCmd {
  std::string target, history;
  history::GateOptions gate;
};

// Where the target's history is and which case (absolute; "" for every case in it).
struct HistoryTarget {
  std::string db, case_path;
};
HistoryTarget resolve_history_target(const std::string& target, const std::string& given);

int run_history(const HistoryCmd& c);
int run_gate(GateCmd c);

}  // namespace tdiff::app
