#pragma once
// Options shared by the commands that judge and report a comparison (compare, run, bisect):
// thresholds file and overrides, report folder, terminal detail.
#include <string>
#include <vector>

#include "diff/compare.h"
#include "diff/thresholds.h"
#include "report/report.h"

namespace tdiff::app {

struct ReportOptions {
  std::string thresholds;              // TOML thresholds file
  std::vector<std::string> overrides;  // "KEY=VALUE" or "GLOB:KEY=VALUE[,KEY=VALUE]"
  std::string out_dir, run_id;
  bool all_rows = false, no_reports = false;

  // The thresholds, with every rule's pattern checked against `keys` ("stage/tensor").
  ThresholdPolicy make_thresholds(const std::vector<std::string>& keys) const;
  // " --thresholds ... --threshold ..." for reproduce commands.
  std::string flags() const;
  // Prints the terminal table and writes the report files (unless --no-reports).
  void emit(const CompareResult& r, const RunInfo& info) const;
  // emit in two steps, for a command that records into its case in between (run: a case that
  // cannot be updated fails before any report is written).
  void print(const CompareResult& r, const RunInfo& info) const;
  void write(const CompareResult& r, const RunInfo& info) const;
};

}  // namespace tdiff::app
