#include "report/depth.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "report/summary.h"

namespace tdiff::report {

std::vector<DepthRow> error_over_depth(const CompareResult& r) {
  std::map<int, DepthRow> by_layer;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    // "L07.hc_ffn.post": the layer's output streams (any two files can be compared: a key that
    // only looks like one is skipped).
    const auto dot = d.stage.find('.');
    if (dot == std::string::npos || dot < 2 || dot > 4 || d.stage[0] != 'L' || d.stage.substr(dot + 1) != "hc_ffn.post")
      continue;
    if (!std::all_of(d.stage.begin() + 1, d.stage.begin() + static_cast<long>(dot), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    if (d.routing || std::isnan(d.metrics.rel_l2)) continue;
    DepthRow row;
    row.layer = std::stoi(d.stage.substr(1, dot - 1));
    row.row = i;
    row.rel_l2 = d.metrics.rel_l2;
    if (d.expected) row.expected = d.expected->rel;
    by_layer[row.layer] = row;
  }
  std::vector<DepthRow> out;
  for (auto& [layer, row] : by_layer) {
    if (!out.empty() && out.back().rel_l2 > 0) row.growth = row.rel_l2 / out.back().rel_l2;
    out.push_back(row);
  }
  if (out.size() < 2) out.clear();
  return out;
}

double mean_growth(const std::vector<DepthRow>& rows) {
  double log_sum = 0;
  int n = 0;
  for (const auto& r : rows)
    if (r.growth > 0) log_sum += std::log(r.growth), ++n;
  return n ? std::exp(log_sum / n) : -1;
}

std::string depth_html(const CompareResult& r) {
  const std::vector<DepthRow> rows = error_over_depth(r);
  if (rows.empty()) return "";
  double top = 0;
  for (const auto& d : rows) top = std::max({top, d.rel_l2, d.expected});
  const double floor = top > 0 ? top * 1e-6 : 1;
  auto width = [&](double v) {  // a log bar over six decades below the largest value
    return v <= 0 ? 0.0 : std::clamp(100 * (1 + std::log10(std::max(v, floor) / top) / 6), 0.0, 100.0);
  };
  std::string o = fmt::format(
      "<h3>Error over depth</h3>\n<p class=\"sub\">The residual streams' relative error after each layer "
      "(<code>Lxx.hc_ffn.post</code>); mean growth per layer {}.</p>\n<table class=\"depth\"><thead><tr><th>layer</th>"
      "<th>rel_l2</th><th>expected</th><th>x expected</th><th>growth</th><th style=\"width:40%\">rel_l2 (bar, log) and "
      "expected (line)</th></tr></thead><tbody>\n",
      mean_growth(rows) > 0 ? fmt::format("{:.3f}x", mean_growth(rows)) : "-");
  for (const auto& d : rows) {
    const bool has_expected = d.expected > 0;
    o += fmt::format(
        "<tr><td><a href=\"#row-{}\">L{:02}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><div style=\"position:"
        "relative;height:12px;background:#eef\"><div style=\"width:{:.1f}%;height:12px;background:#2e86c1\"></div>{}</div>"
        "</td></tr>\n",
        d.row, d.layer, num(d.rel_l2), has_expected ? num(d.expected) : "-",
        has_expected ? num(d.rel_l2 / d.expected, "{:.2g}") : "-", d.growth > 0 ? num(d.growth, "{:.3g}") : "-",
        width(d.rel_l2),
        has_expected ? fmt::format("<div style=\"position:absolute;left:{:.1f}%;top:0;width:2px;height:12px;"
                                   "background:#c0392b\"></div>",
                                   width(d.expected))
                     : "");
  }
  return o + "</tbody></table>\n";
}

}  // namespace tdiff::report
