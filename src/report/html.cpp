// report.html: one self-contained page (inline CSS, SVG and a little JS; no network).
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/version.h"
#include "diff/metric_fields.h"
#include "report/html_plot.h"
#include "report/html_style.h"
#include "report/report.h"
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
// its lowest cosine and its highest max-abs error as that tensor's rule reads it.
struct StagePoint {
  double cosine = 1.0, judged = 0.0;
  const Thresholds* cosine_t = nullptr;
  const Thresholds* judged_t = nullptr;
};
StagePoint stage_point(const CompareResult& r, const report::StageSummary& s) {
  StagePoint p;
  for (std::size_t i : s.rows) {
    const TensorDiff& d = r.rows[i];
    if (d.kind != TensorKind::values && d.kind != TensorKind::logits) continue;
    if (!p.cosine_t || d.metrics.cosine < p.cosine) p.cosine = d.metrics.cosine, p.cosine_t = &d.thresholds;
    const double j = judged_max_abs(d.metrics, d.thresholds);
    if (!p.judged_t || j > p.judged) p.judged = j, p.judged_t = &d.thresholds;
  }
  return p;
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

std::string plots(const CompareResult& r) {
  const auto stages = report::summarize_stages(r);
  std::vector<const report::StageSummary*> shown;
  std::vector<StagePoint> pts;
  for (const auto& s : stages)
    if (s.has_values) shown.push_back(&s), pts.push_back(stage_point(r, s));
  if (shown.empty()) return "<p class=\"sub\">No floating-point tensors to plot.</p>\n";

  std::vector<report::PlotBand> bands;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const std::string g = report::group_name(shown[i]->stage);
    if (bands.empty() || bands.back().label != g) bands.push_back({i, i, g});
    bands.back().end = i + 1;
  }
  const std::size_t n = shown.size();
  const double nan = std::nan("");
  std::vector<double> cos_fail(n), cos_warn(n), mab_fail(n), mab_warn(n), log_fail(n), log_warn(n);
  std::size_t scaled = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Thresholds &ct = *pts[i].cosine_t, &mt = *pts[i].judged_t;
    cos_fail[i] = ct.cosine_fail;
    cos_warn[i] = ct.cosine_warn > -1 ? ct.cosine_warn : nan;
    mab_fail[i] = mt.max_abs_fail, mab_warn[i] = mt.max_abs_warn;
    log_fail[i] = std::log10(mt.max_abs_fail), log_warn[i] = std::log10(mt.max_abs_warn);
    scaled += mt.max_abs_scaled != 0 ? 1 : 0;
  }

  report::PlotSpec cos;
  cos.title = "cosine similarity per stage (lowest tensor of the stage)";
  cos.bands = bands;
  double lo = 1.0;
  for (std::size_t i = 0; i < n; ++i) lo = std::min({lo, cos_fail[i], shown[i]->cosine});
  cos.y_lo = std::max(-1.0, lo - std::max(1.0 - lo, 1e-6) * 0.25);
  cos.y_hi = 1.0;
  cos.tick = [](double y) { return fmt::format("{:.6g}", y); };
  add_lines(cos, cos_fail, cos_fail, "FAIL below {:g}", "fail");
  add_lines(cos, cos_warn, cos_warn, "WARN below {:g}", "warn");

  // Each stage's point is the number its tensors' max_abs rules judge, so the lines apply to it.
  report::PlotSpec mab;
  mab.title = scaled == n ? "max_abs_scaled (max-abs error / max(1, rms(r), |r|)) per stage, log10 scale (highest tensor of the stage)"
              : scaled == 0 ? "max-abs error per stage, log10 scale (highest tensor of the stage)"
                            : "max-abs error as each tensor's rule judges it (max_abs_scaled or max_abs) per stage, log10 "
                              "scale (highest tensor of the stage)";
  mab.bands = bands;
  double hi = -HUGE_VAL, low = HUGE_VAL;
  for (std::size_t i = 0; i < n; ++i)
    for (double v : {log_fail[i], log_warn[i], pts[i].judged > 0 ? std::log10(pts[i].judged) : nan})
      if (std::isfinite(v)) hi = std::max(hi, v), low = std::min(low, v);
  if (hi < low) hi = low = 0;  // nothing finite to show
  mab.y_lo = low - 0.3;
  mab.y_hi = hi + 0.3;
  mab.min_step = 1.0;
  mab.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  add_lines(mab, log_fail, mab_fail, "FAIL at {:g}", "fail");
  add_lines(mab, log_warn, mab_warn, "WARN at {:g}", "warn");

  for (std::size_t i = 0; i < n; ++i) {
    const report::StageSummary* s = shown[i];
    const std::string href = fmt::format("#row-{}", s->rows.front());
    const std::string tip =
        fmt::format("{}: {} cosine {} max_abs {} max_abs_scaled {}", s->stage, verdict_name(s->verdict),
                    report::cosine_text(s->cosine), num(s->max_abs), num(s->max_abs_scaled));
    cos.points.push_back({std::max(s->cosine, cos.y_lo), s->verdict, tip, href});
    const double lm = pts[i].judged > 0 ? std::log10(pts[i].judged) : mab.y_lo;
    mab.points.push_back({std::isfinite(lm) ? lm : mab.y_hi, s->verdict, tip, href});
  }
  return report::svg_plot(cos) + report::svg_plot(mab) +
         "<p class=\"legend\">One point per stage in model order, coloured by verdict (click one to see its row). "
         "Dashed lines: the thresholds each stage was judged by (those of the tensor its point shows), so a rule "
         "that changes a stage's thresholds moves its line. A max-abs of 0 is drawn on the bottom edge.</p>\n";
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
  o += "<th>NaN/Inf</th><th>verdict</th><th>reason</th></tr></thead><tbody>\n";
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
    o += num_cell(static_cast<double>(bad),
                  bad || m.nan_ref + m.inf_ref ? fmt::format("{} / {}", m.nan_ref + m.inf_ref, bad) : "");
    o += fmt::format("<td data-v=\"{}\">{}</td><td class=\"reason\">{}</td></tr>\n", static_cast<int>(d.verdict),
                     badge(d.verdict), html_escape(reason));
  }
  o += "</tbody></table>\n";
  o += "<p class=\"legend\">NaN/Inf: reference / candidate counts. max_abs_scaled = max |c-r| / max(1, rms(r), |r|): "
       "the absolute error on tensors of order 1, else relative to the tensor's scale or the element. rel_l2 = |c-r|/|r|; max_rel floors |r| at the "
       "documented rel_floor. Integer tensors are compared exactly.</p>\n";
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
        "<h3><code>{}</code> {}</h3>\n<p>{} tokens, vocabulary {}: top-1 agreement <b>{:.2f}%</b>, top-10 overlap "
        "mean {:.2f}% (lowest {:.0f}%), KL(ref&#8214;cand) mean {} &middot; p99 {} &middot; max {}{}.</p>\n",
        html_escape(d.key()), badge(d.verdict), l.tokens, l.vocab, 100 * l.top1_agree, 100 * l.topk_overlap_mean,
        100 * l.topk_overlap_min, num(l.kl_mean), num(l.kl_p99), num(l.kl_max),
        l.nonfinite_tokens ? fmt::format(", {} tokens with NaN/Inf left out", l.nonfinite_tokens) : "");
    if (l.worst.empty()) continue;
    o += "<p class=\"legend\">Worst tokens by KL, each side's top-10 (ids missing from the other side's top-10 in "
         "red).</p>\n<div class=\"tokens\">\n";
    const std::int64_t seq = d.shape.size() >= 3 ? d.shape[d.shape.size() - 2] : 0;
    for (const auto& t : l.worst) {
      const std::string where = seq ? fmt::format("row {}, position {}", t.token / seq, t.token % seq)
                                    : fmt::format("token {}", t.token);
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
  o += fmt::format("<div class=\"head\">{}<div><h1>{}</h1><p class=\"sub\">reference <code>{}</code> &middot; "
                   "candidate <code>{}</code></p><p class=\"sub\">case <b>{}</b> &middot; run <code>{}</code> &middot; "
                   "tdiff {}</p></div></div>\n",
                   badge(r.verdict, true), html_escape(title), html_escape(r.label_ref), html_escape(r.label_cand),
                   html_escape(info.case_name), html_escape(info.run_id), TDIFF_VERSION);
  o += summary_cards(r);
  o += "<h2>Along the model</h2>\n" + plots(r);
  o += logits_section(r);
  o += "<h2>Stages</h2>\n" + stage_table(r);
  o += missing_section(r);
  o += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(info.command.empty() ? "(not recorded)" : info.command));
  const Thresholds& t = r.thresholds;
  const char* max_abs_name = t.max_abs_scaled != 0 ? "max_abs_scaled" : "max_abs";
  o += fmt::format(
      "<p class=\"legend\">Default thresholds: FAIL when cosine &lt; {:g}, {} &ge; {:g} or a NaN/Inf the "
      "reference lacks; WARN when {} &ge; {:g}; integer tensors FAIL above {:g}% mismatches, WARN above {:g}%. "
      "Per-stage rules of a thresholds file show in each row's reason.</p>\n",
      t.cosine_fail, max_abs_name, t.max_abs_fail, max_abs_name, t.max_abs_warn, 100 * t.mismatch_fail,
      100 * t.mismatch_warn);
  o += "<h2>Environment</h2>\n<table class=\"env\"><tbody>\n";
  for (const auto& [k, v] : info.env)
    o += fmt::format("<tr><td>{}</td><td><code>{}</code></td></tr>\n", html_escape(k), html_escape(v));
  o += "</tbody></table>\n";
  o += fmt::format("</main>\n<script>{}</script>\n</body></html>\n", report::kHtmlScript);
  return o;
}

}  // namespace tdiff
