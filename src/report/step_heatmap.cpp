#include "report/step_heatmap.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "diff/step_errors.h"
#include "report/summary.h"

namespace tdiff::report {

namespace {

struct Cell {
  double ratio = -1;  // the largest step ratio of the group's tensors (< 0: none)
  std::size_t row = 0;
};

}  // namespace

std::string step_heatmap_html(const CompareResult& r) {
  if (r.steps.empty()) return "";
  std::vector<std::string> groups;                 // prologue, L00, ..., head in model order
  std::map<std::string, std::vector<Cell>> cells;  // group -> per step
  double fail = r.thresholds.expected_fail;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    if (r.rows[i].step_rel_l2.empty()) continue;
    const std::string g = group_name(r.rows[i].stage);
    auto [it, fresh] = cells.try_emplace(g, std::vector<Cell>(r.steps.size()));
    if (fresh) groups.push_back(g);
    for (std::size_t j = 0; j < r.steps.size(); ++j) {
      const double ratio = step_ratio(r, i, j);
      if (!std::isnan(ratio) && ratio > it->second[j].ratio) it->second[j] = {ratio, i};
    }
  }
  if (groups.empty()) return "";
  std::string o = fmt::format(
      "<h3>Steps against the cache</h3>\n<p class=\"sub\">{}</p>\n<table class=\"heat\"><thead><tr><th>part</th>",
      html_escape(step_note(r)));
  for (std::size_t j = 0; j < r.steps.size(); ++j) {
    const ScheduleStep& st = r.steps[j];
    o += fmt::format("<th title=\"{}\">{}</th>", step_where(st),
                     st.decode ? std::to_string(st.begin) : fmt::format("c{}", j + 1));
  }
  o += "</tr></thead><tbody>\n";
  for (const auto& g : groups) {
    o += fmt::format("<tr><td>{}</td>", html_escape(g));
    for (const Cell& c : cells[g]) {
      if (c.ratio < 0) {
        o += "<td class=\"h none\"></td>";
        continue;
      }
      const double t = std::clamp(std::log(std::max(c.ratio, 1.0)) / std::log(fail), 0.0, 1.0);
      o += fmt::format("<td class=\"h\" style=\"background:hsl({:.0f},75%,{:.0f}%)\" title=\"{}: {}x the expected "
                       "error\"><a href=\"#row-{}\">&nbsp;</a></td>",
                       120 * (1 - t), 82 - 22 * t, html_escape(r.rows[c.row].key()), num(c.ratio), c.row);
    }
    o += "</tr>\n";
  }
  return o + "</tbody></table>\n<p class=\"legend\">Columns: the prefill chunks (c1, c2, ...), then each decode "
             "step by its position. A cell: the largest error over one step's positions, among the part's tensors, "
             "in units of the tensor's expected error; red at the FAIL factor.</p>\n";
}

}  // namespace tdiff::report
