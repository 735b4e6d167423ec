#pragma once
// Reports of a `tdiff ci` run over a golden prompt set: one summary table for the terminal,
// junit.xml with one testcase per case, and index.html linking every case's own report.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diff/thresholds.h"

namespace tdiff {

struct CiRow {
  std::string name, about;
  std::string inputs;        // "8 x 12, right padding"
  std::string model;         // the suite's [models.NAME] it runs on ("": its [model])
  Verdict verdict = Verdict::pass;
  std::string reason;        // why it is not PASS ("" when PASS)
  int tensors = 0, fails = 0, warns = 0;
  std::optional<double> logits_cosine, logits_top1, logits_kl_max;
  int runs = 1;              // candidate runs compared bit for bit
  bool deterministic = true;
  double seconds = 0;
  std::string report;              // report.html, relative to the index
  std::string determinism_report;  // "" when the runs agreed
  std::string case_file, run_id;
};

struct CiSummary {
  std::string suite, description;
  std::string command;        // the exact command that reproduces the run
  std::string candidate;      // "emu under fixed"
  std::string cache;          // where the models and references came from
  std::string thresholds_file, thresholds_text;  // the gate, shown verbatim
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<CiRow> rows;
  double seconds = 0;
  Verdict verdict() const;
};

std::string render_ci_table(const CiSummary& s, bool color);
std::string render_ci_junit(const CiSummary& s);
std::string render_ci_index(const CiSummary& s);

}  // namespace tdiff
