// report.html: one self-contained page (inline CSS, SVG and a little JS; no network).
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/version.h"
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

std::string plots(const CompareResult& r, const RunInfo& info) {
  const auto stages = report::summarize_stages(r);
  std::vector<const report::StageSummary*> shown;
  for (const auto& s : stages)
    if (s.has_values) shown.push_back(&s);
  if (shown.empty()) return "<p class=\"sub\">No floating-point tensors to plot.</p>\n";

  std::vector<report::PlotBand> bands;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const std::string g = report::group_name(shown[i]->stage);
    if (bands.empty() || bands.back().label != g) bands.push_back({i, i, g});
    bands.back().end = i + 1;
  }
  const Thresholds& t = info.thresholds;

  report::PlotSpec cos;
  cos.title = "cosine similarity per stage (lowest tensor of the stage)";
  cos.bands = bands;
  double lo = t.cosine_fail;
  for (auto* s : shown) lo = std::min(lo, s->cosine);
  cos.y_lo = std::max(-1.0, lo - std::max(1.0 - lo, 1e-6) * 0.25);
  cos.y_hi = 1.0;
  cos.tick = [](double y) { return fmt::format("{:.6g}", y); };
  cos.lines.push_back({t.cosine_fail, fmt::format("FAIL below {:g}", t.cosine_fail), "fail"});
  if (t.cosine_warn > -1) cos.lines.push_back({t.cosine_warn, fmt::format("WARN below {:g}", t.cosine_warn), "warn"});

  // The number the default max_abs rules judge, so that the threshold lines apply to the points.
  const bool scaled = t.max_abs_scaled != 0;
  auto judged = [&](const report::StageSummary* s) { return scaled ? s->max_abs_scaled : s->max_abs; };
  report::PlotSpec mab;
  mab.title = scaled ? "max_abs_scaled (max-abs error / max(1, rms(r), |r|)) per stage, log10 scale (highest tensor of the stage)"
                     : "max-abs error per stage, log10 scale (highest tensor of the stage)";
  mab.bands = bands;
  double hi = std::log10(t.max_abs_fail), low = std::log10(t.max_abs_warn);
  for (auto* s : shown)
    if (judged(s) > 0 && std::isfinite(judged(s))) {
      hi = std::max(hi, std::log10(judged(s)));
      low = std::min(low, std::log10(judged(s)));
    }
  mab.y_lo = low - 0.3;
  mab.y_hi = hi + 0.3;
  mab.min_step = 1.0;
  mab.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  mab.lines.push_back({std::log10(t.max_abs_fail), fmt::format("FAIL at {:g}", t.max_abs_fail), "fail"});
  mab.lines.push_back({std::log10(t.max_abs_warn), fmt::format("WARN at {:g}", t.max_abs_warn), "warn"});

  for (auto* s : shown) {
    const std::string href = fmt::format("#row-{}", s->rows.front());
    const std::string tip =
        fmt::format("{}: {} cosine {} max_abs {} max_abs_scaled {}", s->stage, verdict_name(s->verdict),
                    report::cosine_text(s->cosine), num(s->max_abs), num(s->max_abs_scaled));
    cos.points.push_back({std::max(s->cosine, cos.y_lo), s->verdict, tip, href});
    const double lm = judged(s) > 0 ? std::log10(judged(s)) : mab.y_lo;
    mab.points.push_back({std::isfinite(lm) ? lm : mab.y_hi, s->verdict, tip, href});
  }
  return report::svg_plot(cos) + report::svg_plot(mab) +
         "<p class=\"legend\">One point per stage in model order, coloured by verdict (click one to see its row). "
         "Dashed lines: the default thresholds; per-stage overrides show in the table's reasons. "
         "A max-abs of 0 is drawn on the bottom edge.</p>\n";
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
        "</code></a><br><span class=\"sub\">{}</span></div></div>\n",
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
      "<table id=\"stages\" class=\"sortable\"><thead><tr><th>#</th><th>stage</th><th>tensor</th><th>cosine</th>"
      "<th>max_abs</th><th>max_abs_scaled</th><th>rmse</th><th>rel_l2</th><th>max_rel</th><th>ref_rms</th><th>NaN/Inf</th><th>verdict</th>"
      "<th>reason</th></tr></thead><tbody>\n";
  std::string group;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    const TensorMetrics& m = d.metrics;
    if (const auto g = report::group_name(d.stage); g != group) {
      group = g;
      o += fmt::format("<tr class=\"grp\"><td colspan=\"13\">{}</td></tr>\n", html_escape(g));
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
    o += num_cell(m.cosine, exact ? "exact" : report::cosine_text(m.cosine));
    // Distances between ids mean nothing: exact tensors show only their mismatch count.
    auto metric = [&](double v) { return num_cell(v, exact ? "" : num(v, "{:.2e}")); };
    o += metric(m.max_abs) + metric(m.max_abs_scaled) + metric(m.rmse) + metric(m.rel_l2) + metric(m.max_rel) + metric(m.ref_rms);
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
  o += "<h2>Along the model</h2>\n" + plots(r, info);
  o += logits_section(r);
  o += "<h2>Stages</h2>\n" + stage_table(r);
  o += missing_section(r);
  o += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(info.command.empty() ? "(not recorded)" : info.command));
  const Thresholds& t = info.thresholds;
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
