// report.html: one self-contained page (inline CSS, SVG and a little JS; no network).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/version.h"
#include "diff/metric_fields.h"
#include "report/html_plot.h"
#include "report/html_style.h"
#include "report/report.h"
#include "report/depth.h"
#include "report/step_heatmap.h"
#include "report/token_table.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::html_escape;
using report::num;

std::string badge(Verdict v, bool big = false) {
  return fmt::format("<span class=\"badge{} {}\">{}</span>", big ? " big" : "", verdict_name(v), verdict_name(v));
}

// A numeric cell that sorts by its exact value (data-v) and shows a short form.
std::string num_cell(double v, const std::string& text) {
  const std::string key = std::isnan(v) ? "-1e308" : std::isinf(v) ? (v > 0 ? "1e308" : "-1e308") : fmt::format("{}", v);
  return fmt::format("<td class=\"num\" data-v=\"{}\">{}</td>", key, html_escape(text));
}

// One metric of the stage table. Distances between ids mean nothing: exact tensors show only
// their mismatch count (and "exact" under cosine).
std::string metric_cell(const MetricField<TensorMetrics>& f, const TensorMetrics& m, bool exact) {
  const MetricValue v = f.value(m);
  const double x = std::holds_alternative<double>(v) ? std::get<double>(v)
                   : std::holds_alternative<bool>(v) ? std::get<bool>(v)
                                                     : static_cast<double>(std::get<std::int64_t>(v));
  const bool cosine = f.member == decltype(f.member)(&TensorMetrics::cosine);
  if (cosine) return num_cell(x, exact ? "exact" : report::cosine_text(x));
  if (!std::holds_alternative<double>(v)) return num_cell(x, exact ? "" : fmt::format("{}", x));
  return num_cell(x, exact ? "" : num(x, "{:.2e}"));
}

// What a stage shows in the plots, with the thresholds of the tensor each point comes from:
// its lowest cosine, its highest max-abs error as that tensor's rule reads it, and its
// highest ratio to the expected error (NaN where no tensor has one).
struct StagePoint {
  double cosine = 1.0, judged = 0.0, ratio = std::nan("");
  const Thresholds* cosine_t = nullptr;
  const Thresholds* judged_t = nullptr;
  const Thresholds* ratio_t = nullptr;
};
StagePoint stage_point(const CompareResult& r, const report::StageSummary& s) {
  StagePoint p;
  for (std::size_t i : s.rows) {
    const TensorDiff& d = r.rows[i];
    if (d.kind != TensorKind::values && d.kind != TensorKind::logits) continue;
    if (!p.cosine_t || d.metrics.cosine < p.cosine) p.cosine = d.metrics.cosine, p.cosine_t = &d.thresholds;
    const double j = judged_max_abs(d.metrics, d.thresholds);
    if (!p.judged_t || j > p.judged) p.judged = j, p.judged_t = &d.thresholds;
    if (!std::isnan(d.tolerance_ratio) && (!p.ratio_t || d.tolerance_ratio > p.ratio))
      p.ratio = d.tolerance_ratio, p.ratio_t = &d.thresholds;
  }
  return p;
}

// Layer bands behind a plot of these stages.
std::vector<report::PlotBand> layer_bands(const std::vector<const report::StageSummary*>& shown) {
  std::vector<report::PlotBand> bands;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const std::string g = report::group_name(shown[i]->stage);
    if (bands.empty() || bands.back().label != g) bands.push_back({i, i, g});
    bands.back().end = i + 1;
  }
  return bands;
}

// Marks the first divergence (the first FAIL in model order) on a plot of `shown` stages: at
// its own point, or at the first plotted stage after it when the plot does not show it.
void mark_first_divergence(report::PlotSpec& plot, const CompareResult& r,
                           const std::vector<const report::StageSummary*>& shown) {
  if (r.first_fail < 0) return;
  const auto at = static_cast<std::size_t>(r.first_fail);
  for (std::size_t i = 0; i < shown.size(); ++i)
    if (shown[i]->rows.back() >= at) {
      plot.marker = static_cast<std::ptrdiff_t>(i);
      plot.marker_label = (shown[i]->rows.front() <= at ? "first divergence " : "after the first divergence ") +
                          r.rows[at].key();
      return;
    }
}

// The point of a log10 axis for a value >= 0 (0: the bottom edge).
double log_point(double v, double y_lo, double y_hi) {
  if (!(v > 0)) return y_lo;
  return std::isfinite(v) ? std::log10(v) : y_hi;
}

// A threshold line per run of stages with the same value (NaN: none drawn there), each value
// labelled once, on its longest run. With the same thresholds everywhere: one full-width line.
void add_lines(report::PlotSpec& plot, const std::vector<double>& y, const std::vector<double>& value,
               const char* label, const char* css) {
  std::vector<report::PlotLine> runs;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::isnan(y[i])) continue;
    if (runs.empty() || runs.back().end != i || runs.back().y != y[i])
      runs.push_back({y[i], fmt::format(fmt::runtime(label), value[i]), css, i, i});
    runs.back().end = i + 1;
  }
  auto length = [&](std::size_t i) { return runs[i].end - runs[i].begin; };
  for (std::size_t a = 0; a < runs.size(); ++a)
    for (std::size_t b = 0; b < runs.size(); ++b)
      if (a != b && runs[b].y == runs[a].y && (length(b) > length(a) || (length(b) == length(a) && b < a)))
        runs[a].label.clear();  // b carries this value's label
  for (auto& l : runs) plot.lines.push_back(std::move(l));
}

// log10(1 - cosine) per stage: 1 - cos is about rel_l2^2 / 2, so the axis spreads the values
// a linear cosine axis crowds at 1.
report::PlotSpec cosine_plot(const std::vector<const report::StageSummary*>& shown, const std::vector<StagePoint>& pts) {
  const std::size_t n = shown.size();
  const double nan = std::nan("");
  std::vector<double> fail(n), warn(n), fail_v(n), warn_v(n);
  report::PlotSpec p;
  p.title = "1 - cosine per stage, log10 scale (lowest cosine of the stage; higher is worse)";
  p.bands = layer_bands(shown);
  double lo = 0, hi = -HUGE_VAL;
  for (std::size_t i = 0; i < n; ++i) {
    const Thresholds& t = *pts[i].cosine_t;
    fail_v[i] = t.cosine_fail, warn_v[i] = t.cosine_warn;
    fail[i] = t.cosine_fail > -1 ? std::log10(1 - t.cosine_fail) : nan;
    warn[i] = t.cosine_warn > -1 ? std::log10(1 - t.cosine_warn) : nan;
    const double v = 1 - pts[i].cosine;
    for (double y : {fail[i], warn[i], v > 0 ? std::log10(v) : nan})
      if (std::isfinite(y)) hi = std::max(hi, y), lo = std::min(lo, y);
  }
  if (hi < lo) hi = lo;
  p.y_lo = lo - 0.3, p.y_hi = hi + 0.3, p.min_step = 1.0;
  p.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  add_lines(p, fail, fail_v, "FAIL below cosine {:g}", "fail");
  add_lines(p, warn, warn_v, "WARN below cosine {:g}", "warn");
  return p;
}

// Each stage's highest ratio of error to what the candidate's formats explain, log10 scale.
report::PlotSpec ratio_plot(const std::vector<const report::StageSummary*>& shown, const std::vector<StagePoint>& pts) {
  const std::size_t n = shown.size();
  const double nan = std::nan("");
  std::vector<double> fail(n, nan), warn(n, nan), fail_v(n, nan), warn_v(n, nan);
  report::PlotSpec p;
  p.title = "error / expected error per stage, log10 scale (max of rel_l2 / E and err_rel / E_elem; highest tensor)";
  p.bands = layer_bands(shown);
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (std::size_t i = 0; i < n; ++i) {
    if (!pts[i].ratio_t) continue;
    const Thresholds& t = *pts[i].ratio_t;
    fail_v[i] = t.expected_fail, warn_v[i] = t.expected_warn;
    fail[i] = std::log10(t.expected_fail), warn[i] = std::log10(t.expected_warn);
    for (double y : {fail[i], warn[i], pts[i].ratio > 0 ? std::log10(pts[i].ratio) : nan})
      if (std::isfinite(y)) hi = std::max(hi, y), lo = std::min(lo, y);
  }
  if (hi < lo) hi = lo = 0;
  p.y_lo = lo - 0.3, p.y_hi = hi + 0.3, p.min_step = 1.0;
  p.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  add_lines(p, fail, fail_v, "FAIL above {:g}x", "fail");
  add_lines(p, warn, warn_v, "WARN above {:g}x", "warn");
  return p;
}

// The max-abs error each stage's rule judges (tensors without an expected error: a compare).
report::PlotSpec max_abs_plot(const std::vector<const report::StageSummary*>& shown, const std::vector<StagePoint>& pts) {
  const std::size_t n = shown.size();
  std::vector<double> mab_fail(n), mab_warn(n), log_fail(n), log_warn(n);
  std::size_t scaled = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Thresholds& mt = *pts[i].judged_t;
    mab_fail[i] = mt.max_abs_fail, mab_warn[i] = mt.max_abs_warn;
    log_fail[i] = std::log10(mt.max_abs_fail), log_warn[i] = std::log10(mt.max_abs_warn);
    scaled += mt.max_abs_scaled != 0 ? 1 : 0;
  }
  report::PlotSpec mab;
  mab.title = scaled == n ? "max_abs_scaled (max-abs error / max(1, rms(r), |r|)) per stage, log10 scale (highest tensor of the stage)"
              : scaled == 0 ? "max-abs error per stage, log10 scale (highest tensor of the stage)"
                            : "max-abs error as each tensor's rule judges it (max_abs_scaled or max_abs) per stage, log10 "
                              "scale (highest tensor of the stage)";
  mab.bands = layer_bands(shown);
  double hi = -HUGE_VAL, low = HUGE_VAL;
  for (std::size_t i = 0; i < n; ++i)
    for (double v : {log_fail[i], log_warn[i], pts[i].judged > 0 ? std::log10(pts[i].judged) : std::nan("")})
      if (std::isfinite(v)) hi = std::max(hi, v), low = std::min(low, v);
  if (hi < low) hi = low = 0;  // nothing finite to show
  mab.y_lo = low - 0.3;
  mab.y_hi = hi + 0.3;
  mab.min_step = 1.0;
  mab.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  add_lines(mab, log_fail, mab_fail, "FAIL at {:g}", "fail");
  add_lines(mab, log_warn, mab_warn, "WARN at {:g}", "warn");
  return mab;
}

// Selection stages (moe.select, attn.idx.topk): the share of tokens whose chosen set agrees
// with the reference's, with the FAIL line at 1 - mismatch_fail.
std::string selection_plot(const CompareResult& r, const std::vector<report::StageSummary>& stages) {
  std::vector<const report::StageSummary*> shown;
  std::vector<const TensorDiff*> rows;
  for (const auto& s : stages)
    for (std::size_t i : s.rows)
      if (r.rows[i].routing) {
        shown.push_back(&s), rows.push_back(&r.rows[i]);
        break;
      }
  if (shown.empty()) return "";
  report::PlotSpec p;
  p.title = "selection agreement per selection stage, % of tokens with the reference's choice (ties count as agreeing)";
  p.bands = layer_bands(shown);
  std::vector<double> fail(shown.size()), fail_v(shown.size());
  double lo = 100;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const RoutingMetrics& m = *rows[i]->routing;
    const double agree = 100 * (1 - m.mismatch_share);
    fail_v[i] = 100 * rows[i]->thresholds.mismatch_fail;
    fail[i] = 100 - fail_v[i];
    lo = std::min({lo, agree, fail[i]});
    p.points.push_back({agree, rows[i]->verdict,
                        fmt::format("{}: {} {:.2f}% agree, {} of {} tokens differ ({} explained by its own scores)",
                                    rows[i]->key(), verdict_name(rows[i]->verdict), agree,
                                    m.tokens - m.equal_tokens - m.tie_tokens, m.tokens, m.explained_tokens),
                        fmt::format("#row-{}", shown[i]->rows.front())});
  }
  p.y_lo = std::max(0.0, lo - std::max(100 - lo, 0.5) * 0.25), p.y_hi = 100;
  p.tick = [](double y) { return fmt::format("{:.4g}%", y); };
  // The rule reads the flips it judges (replayed: only those the candidate's own scores rank lower).
  add_lines(p, fail, fail_v, "FAIL above {:g}% judged flips", "fail");
  mark_first_divergence(p, r, shown);
  return report::svg_plot(p);
}

std::string plots(const CompareResult& r) {
  const auto stages = report::summarize_stages(r);
  std::vector<const report::StageSummary*> shown;
  std::vector<StagePoint> pts;
  bool ratios = false;
  for (const auto& s : stages)
    if (s.has_values) shown.push_back(&s), pts.push_back(stage_point(r, s)), ratios |= pts.back().ratio_t != nullptr;
  if (shown.empty()) return "<p class=\"sub\">No floating-point tensors to plot.</p>\n" + selection_plot(r, stages);

  report::PlotSpec cos = cosine_plot(shown, pts);
  report::PlotSpec err = ratios ? ratio_plot(shown, pts) : max_abs_plot(shown, pts);
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const report::StageSummary* s = shown[i];
    const std::string href = fmt::format("#row-{}", s->rows.front());
    const std::string tip = fmt::format("{}: {} cosine {} max_abs {} max_abs_scaled {}{}", s->stage,
                                        verdict_name(s->verdict), report::cosine_text(s->cosine), num(s->max_abs),
                                        num(s->max_abs_scaled),
                                        std::isnan(pts[i].ratio) ? "" : " error/expected " + num(pts[i].ratio));
    cos.points.push_back({log_point(1 - pts[i].cosine, cos.y_lo, cos.y_hi), s->verdict, tip, href});
    const double e = ratios ? pts[i].ratio : pts[i].judged;
    err.points.push_back({std::isnan(e) ? err.y_lo : log_point(e, err.y_lo, err.y_hi), s->verdict, tip, href});
  }
  mark_first_divergence(cos, r, shown);
  mark_first_divergence(err, r, shown);
  return report::svg_plot(cos) + report::svg_plot(err) + selection_plot(r, stages) +
         "<p class=\"legend\">One point per stage in model order, coloured by verdict (click one to see its row). "
         "Dashed lines: the thresholds each stage was judged by (those of the tensor its point shows), so a rule "
         "that changes a stage's thresholds moves its line; the dotted red line marks the first divergence (the "
         "first FAIL). A value of 0 (an identical tensor) is drawn on the bottom edge.</p>\n";
}

// Layer x operator: each cell the stage's highest ratio of error to the expected error,
// coloured from green (1x or less) through the WARN factor to red at the FAIL factor.
std::string heatmap(const CompareResult& r) {
  const auto stages = report::summarize_stages(r);
  std::vector<std::string> ops;
  int layers = 0;
  std::map<std::pair<std::string, int>, std::pair<std::size_t, StagePoint>> cells;
  for (const auto& s : stages) {
    if (s.layer < 0 || !s.has_values) continue;
    const StagePoint p = stage_point(r, s);
    if (!p.ratio_t) continue;
    const std::string op = s.stage.substr(s.stage.find('.') + 1);
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    layers = std::max(layers, s.layer + 1);
    cells[{op, s.layer}] = {s.rows.front(), p};
  }
  if (cells.empty()) return "";
  const bool text = layers <= 16;  // room for the numbers; beyond, colour and a tooltip
  std::string o = "<h3>Worst error / expected error, layer x operator</h3>\n<table class=\"heat\"><thead><tr><th>operator</th>";
  for (int l = 0; l < layers; ++l) o += fmt::format("<th>{}</th>", text ? fmt::format("L{:02}", l) : std::to_string(l));
  o += "</tr></thead><tbody>\n";
  for (const auto& op : ops) {
    o += fmt::format("<tr><td><code>{}</code></td>", html_escape(op));
    for (int l = 0; l < layers; ++l) {
      auto it = cells.find({op, l});
      if (it == cells.end()) {
        o += "<td class=\"h none\"></td>";
        continue;
      }
      const auto& [row, p] = it->second;
      const double t = std::clamp(std::log(std::max(p.ratio, 1.0)) / std::log(p.ratio_t->expected_fail), 0.0, 1.0);
      o += fmt::format("<td class=\"h\" style=\"background:hsl({:.0f},75%,{:.0f}%)\" title=\"{}: {}x the expected "
                       "error\"><a href=\"#row-{}\">{}</a></td>",
                       120 * (1 - t), 82 - 22 * t, html_escape(r.rows[row].stage), num(p.ratio), row,
                       text ? num(p.ratio, "{:.2g}") : "&nbsp;");
    }
    o += "</tr>\n";
  }
  return o + "</tbody></table>\n<p class=\"legend\">Green: within what the formats explain; red: at or beyond the "
             "FAIL factor. Click a cell to see its row.</p>\n";
}

std::string summary_cards(const CompareResult& r) {
  std::string o = "<div class=\"cards\">\n";
  const auto c = report::count_verdicts(r);
  o += fmt::format(
      "<div class=\"card\"><div class=\"k\">tensors</div><div class=\"v\">{} FAIL &middot; {} WARN &middot; {} PASS"
      "{}</div></div>\n",
      c.fail, c.warn, c.pass,
      r.only_ref.size() + r.only_cand.size()
          ? fmt::format("<br>{} only in the reference &middot; {} only in the candidate", r.only_ref.size(),
                        r.only_cand.size())
          : "");
  if (r.first_fail >= 0) {
    const auto& f = r.rows[static_cast<std::size_t>(r.first_fail)];
    o += fmt::format(
        "<div class=\"card\"><div class=\"k\">first failing stage</div><div class=\"v\"><a href=\"#row-{}\"><code>{}"
        "</code></a><br><span class=\"sub\">{}</span><br><span class=\"sub\">The first tensor whose own error crosses "
        "its thresholds. <code>tdiff bisect</code> names the first stage whose error makes the logits fail, which can "
        "be another one.</span></div></div>\n",
        r.first_fail, html_escape(f.key()), html_escape(f.reason));
  } else {
    o += "<div class=\"card\"><div class=\"k\">first failing stage</div><div class=\"v\">none</div></div>\n";
  }
  const auto worst = report::worst_rows(r, 5);
  o += "<div class=\"card\"><div class=\"k\">worst tensors</div><div class=\"v\">";
  if (worst.empty()) o += "none: all tensors identical";
  else {
    o += "<ol>";
    for (auto i : worst)
      o += fmt::format("<li><a href=\"#row-{}\"><code>{}</code></a> {} {}</li>", i, html_escape(r.rows[i].key()),
                       report::error_text(r.rows[i]), badge(r.rows[i].verdict));
    o += "</ol>";
  }
  return o + "</div></div>\n</div>\n";
}

std::string stage_table(const CompareResult& r) {
  std::string o =
      "<div class=\"tools\"><label><input type=\"checkbox\" id=\"only-bad\"> show only WARN and FAIL</label>"
      "<span>click a column to sort</span></div>\n"
      "<table id=\"stages\" class=\"sortable\"><thead><tr><th>#</th><th>stage</th><th>tensor</th>";
  int columns = 6;
  for (const auto& f : tensor_metric_fields())
    if (f.show & kShowTable) {
      o += fmt::format("<th>{}</th>", f.name);
      ++columns;
    }
  o += "<th>expected</th><th>x</th><th>where</th><th>NaN/Inf</th><th>verdict</th><th>reason</th></tr>"
       "</thead><tbody>\n";
  columns += 3;
  std::string group;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    const TensorMetrics& m = d.metrics;
    if (const auto g = report::group_name(d.stage); g != group) {
      group = g;
      o += fmt::format("<tr class=\"grp\"><td colspan=\"{}\">{}</td></tr>\n", columns, html_escape(g));
    }
    const bool exact = d.kind == TensorKind::exact || d.kind == TensorKind::routing;
    const std::int64_t bad = m.nan_cand + m.inf_cand;
    std::string reason = d.reason;
    if (d.routing)
      reason = fmt::format("{}/{} tokens differ ({} ties), {} flipped choices{}", d.routing->tokens - d.routing->equal_tokens,
                           d.routing->tokens, d.routing->tie_tokens, d.routing->flips, reason.empty() ? "" : "; " + reason);
    else if (exact)
      reason = fmt::format("{}/{} elements differ{}", m.n_diff, m.count, reason.empty() ? "" : "; " + reason);
    if (d.floor_rmse) reason += (reason.empty() ? "" : "; ") + fmt::format("floor rmse {}", num(*d.floor_rmse));
    o += fmt::format("<tr id=\"row-{}\" class=\"v{}{}\">", i, verdict_name(d.verdict),
                     static_cast<int>(i) == r.first_fail ? " first" : "");
    o += num_cell(static_cast<double>(i), std::to_string(i));
    o += fmt::format("<td><code>{}</code></td><td><code>{}</code></td>", html_escape(d.stage), html_escape(d.tensor));
    for (const auto& f : tensor_metric_fields())
      if (f.show & kShowTable) o += metric_cell(f, m, exact);
    o += num_cell(d.expected && !exact ? d.expected->rel : std::nan(""), report::expected_text(d));
    o += num_cell(d.tolerance_ratio, report::ratio_text(d));
    o += fmt::format("<td class=\"where\">{}</td>", html_escape(report::where_text(r, d)));
    o += num_cell(static_cast<double>(bad),
                  bad || m.nan_ref + m.inf_ref ? fmt::format("{} / {}", m.nan_ref + m.inf_ref, bad) : "");
    o += fmt::format("<td data-v=\"{}\">{}</td><td class=\"reason\">{}</td></tr>\n", static_cast<int>(d.verdict),
                     badge(d.verdict), html_escape(reason));
  }
  o += "</tbody></table>\n";
  o += "<p class=\"legend\">NaN/Inf: reference / candidate counts. rel_l2 = |c-r|/|r|; err_rel = max |c-r| / (|r| + "
       "rms(r)); expected: the relative error E the candidate's formats explain (rounding of its stored formats, float32 "
       "accumulation, the errors its inputs carry); x: the larger of rel_l2 / E and err_rel / (E sqrt(2 ln n)). Where: "
       "the first NaN/Inf the reference lacks, else the element of err_rel (a selection's first other choice, a "
       "mask's differing element), in the model's terms, with the reference's and the candidate's values. Integer tensors are "
       "compared exactly: agreement only.</p>\n";
  return o;
}

std::string top_table(const TokenDetail& t) {
  std::set<std::int64_t> in_ref, in_cand;
  for (const auto& e : t.top_ref) in_ref.insert(e.id);
  for (const auto& e : t.top_cand) in_cand.insert(e.id);
  std::string o = "<table><thead><tr><th>#</th><th>reference id</th><th>p</th><th>candidate id</th><th>p</th></tr>"
                  "</thead><tbody>";
  const std::size_t n = std::max(t.top_ref.size(), t.top_cand.size());
  for (std::size_t k = 0; k < n; ++k) {
    auto cell = [&](const std::vector<TopEntry>& v, const std::set<std::int64_t>& other) {
      if (k >= v.size()) return std::string("<td></td><td></td>");
      const bool miss = !other.count(v[k].id);
      return fmt::format("<td class=\"num{}\">{}</td><td class=\"num\">{:.4f}</td>", miss ? " miss" : "", v[k].id,
                         v[k].prob);
    };
    o += fmt::format("<tr><td>{}</td>{}{}</tr>", k + 1, cell(t.top_ref, in_cand), cell(t.top_cand, in_ref));
  }
  return o + "</tbody></table>";
}

std::string logits_section(const CompareResult& r) {
  std::string o;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    if (!d.logits) continue;
    const LogitsMetrics& l = *d.logits;
    if (o.empty()) o = "<h2>Logits</h2>\n";
    o += fmt::format(
        "<h3><code>{}</code> {}</h3>\n<p>{} {}tokens{}, vocabulary {}: top-1 agreement <b>{:.2f}%</b>, top-10 overlap "
        "mean {:.2f}% (lowest {:.0f}%), KL(ref&#8214;cand) mean {} &middot; p99 {} &middot; max {}{}.</p>\n",
        html_escape(d.key()), badge(d.verdict), l.tokens, r.padding_tokens ? "real " : "", report::padding_note(r),
        l.vocab, 100 * l.top1_agree, 100 * l.topk_overlap_mean,
        100 * l.topk_overlap_min, num(l.kl_mean), num(l.kl_p99), num(l.kl_max),
        l.nonfinite_tokens ? fmt::format(", {} tokens with NaN/Inf left out", l.nonfinite_tokens) : "");
    if (l.worst.empty()) continue;
    o += "<p class=\"legend\">Worst tokens by KL, each side's top-10 (ids missing from the other side's top-10 in "
         "red).</p>\n<div class=\"tokens\">\n";
    for (const auto& t : l.worst) {
      // The token's first logit, located in the padded batch; its vocabulary id dropped.
      const std::int64_t vocab = d.shape.empty() ? 0 : d.shape.back();
      Location at = locate(r.locator.get(), d.key(), d.shape, t.token * vocab);
      if (!at.empty()) at.pop_back();
      const std::string where = at.empty() ? fmt::format("token {}", t.token) : location_text(at);
      o += fmt::format("<div class=\"tok\"><b>{}</b> &middot; KL {}{}\n{}</div>\n", where, num(t.kl),
                       !t.top_ref.empty() && !t.top_cand.empty() && t.top_ref[0].id != t.top_cand[0].id
                           ? " &middot; <span class=\"miss\">top-1 differs</span>"
                           : "",
                       top_table(t));
    }
    o += "</div>\n";
  }
  return o;
}

std::string missing_section(const CompareResult& r) {
  if (r.only_ref.empty() && r.only_cand.empty()) return "";
  std::string o = "<h2>Tensors on one side only</h2>\n";
  auto list = [&](const std::vector<std::string>& keys, const std::string& label) {
    if (keys.empty()) return;
    o += fmt::format("<p>{} ({}):</p><pre>", html_escape(label), keys.size());
    for (const auto& k : keys) o += html_escape(k) + "\n";
    o += "</pre>\n";
  };
  list(r.only_ref, "only in the reference " + r.label_ref);
  list(r.only_cand, "only in the candidate " + r.label_cand);
  return o;
}

}  // namespace

std::string render_html(const CompareResult& r, const RunInfo& info) {
  const std::string title = info.title.empty() ? "tdiff report: " + info.case_name : info.title;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += fmt::format("<title>{} - {}</title>\n<style>{}</style></head>\n<body><main>\n", html_escape(title),
                   verdict_name(r.verdict), report::kHtmlStyle);
  o += fmt::format("<div class=\"head\">{}<div><h1>{}</h1><p class=\"verdict-line\">{}</p>"
                   "<p class=\"sub\">reference <code>{}</code> &middot; "
                   "candidate <code>{}</code></p><p class=\"sub\">case <b>{}</b> &middot; run <code>{}</code> &middot; "
                   "tdiff {}</p></div></div>\n",
                   badge(r.verdict, true), html_escape(title), html_escape(report::verdict_line(r)),
                   html_escape(r.label_ref), html_escape(r.label_cand),
                   html_escape(info.case_name), html_escape(info.run_id), TDIFF_VERSION);
  o += summary_cards(r);
  o += info.stats_html;
  o += "<h2>Along the model</h2>\n" + plots(r) + heatmap(r) + report::depth_html(r) + report::step_heatmap_html(r) +
       report::token_table_html(r);
  o += logits_section(r);
  o += "<h2>Stages</h2>\n" + stage_table(r);
  o += missing_section(r);
  o += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(info.command.empty() ? "(not recorded)" : info.command));
  const Thresholds& t = r.thresholds;
  const char* max_abs_name = t.max_abs_scaled != 0 ? "max_abs_scaled" : "max_abs";
  const std::string tolerance =
      t.tolerance != 0 ? fmt::format("the error above {:g}x (FAIL) or {:g}x (WARN) the expected error where the "
                                     "candidate's formats give one, else ",
                                     t.expected_fail, t.expected_warn)
                       : "";
  o += fmt::format(
      "<p class=\"legend\">Default thresholds: FAIL when cosine &lt; {:g}, a NaN/Inf the reference lacks, {}{} "
      "&ge; {:g} (WARN &ge; {:g}); integer tensors FAIL above {:g}% mismatches, WARN above {:g}%. "
      "Per-stage rules of a thresholds file show in each row's reason.</p>\n",
      t.cosine_fail, html_escape(tolerance), max_abs_name, t.max_abs_fail, t.max_abs_warn, 100 * t.mismatch_fail,
      100 * t.mismatch_warn);
  o += report::env_section(info.env);
  o += fmt::format("</main>\n<script>{}</script>\n</body></html>\n", report::kHtmlScript);
  return o;
}

}  // namespace tdiff
