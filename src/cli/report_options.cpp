#include "cli/report_options.h"

#include <fmt/format.h>

#include "cli/shell.h"

namespace tdiff::cli {

void ReportOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--thresholds", thresholds,
                  "thresholds file (TOML: [default] and [[rule]] stages = glob), or a named set: precision (default: "
                  "errors against what the candidate's formats explain), scaled, paper (the paper's absolute bounds)");
  cmd->add_option("--threshold", overrides, "override 'KEY=VALUE' or 'GLOB:KEY=VALUE[,KEY=VALUE]' (repeatable)");
  cmd->add_option("-o,--out", out_dir, "report folder (default reports/<case>/<run-id>)");
  cmd->add_option("--run-id", run_id, "run id (default: time-based)");
  cmd->add_flag("--all", all_rows, "print every tensor, not only WARN/FAIL, for large runs");
  cmd->add_flag("--no-reports", no_reports, "print the table only; write no report files");
}

ThresholdPolicy ReportOptions::make_thresholds(const std::vector<std::string>& keys) const {
  ThresholdPolicy t = thresholds.empty() ? ThresholdPolicy{} : load_thresholds(thresholds);
  for (const auto& o : overrides) add_threshold_override(t, o);
  t.check_patterns(keys);
  return t;
}

std::string ReportOptions::flags() const {
  std::string s;
  if (!thresholds.empty())
    s += " --thresholds " + shell_quote(named_thresholds(thresholds) ? thresholds : absolute_path(thresholds));
  for (const auto& o : overrides) s += " --threshold " + shell_quote(o);
  return s;
}

void ReportOptions::emit(const CompareResult& r, const RunInfo& info) const {
  print(r, info);
  write(r, info);
}

void ReportOptions::print(const CompareResult& r, const RunInfo& info) const {
  TerminalOptions topt;
  topt.color = want_color(stdout);
  topt.all_rows = all_rows;
  print_terminal(stdout, r, info, topt);
}

void ReportOptions::write(const CompareResult& r, const RunInfo& info) const {
  if (no_reports) return;
  const std::string dir = report_dir(info, out_dir);
  write_reports(dir, r, info);
  fmt::print("reports     {}/report.html (and report.csv, report.json, junit.xml)\n", dir);
}

}  // namespace tdiff::cli
