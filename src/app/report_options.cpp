#include "app/report_options.h"

#include <fmt/format.h>

#include "app/shell.h"

namespace tdiff::app {

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

}  // namespace tdiff::app
