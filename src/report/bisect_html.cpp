// bisect.html: the search trace, the culprits, the isolation ranking and the attribution
// table of one bisection, self-contained like report.html (same style sheet).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/version.h"
#include "report/bisect_report.h"
#include "report/html_plot.h"
#include "report/html_style.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::html_escape;
using report::num;

constexpr const char* kExtraStyle = R"CSS(
.bar { height: 10px; background: #8c959f; border-radius: 2px; min-width: 1px; }
.bar.FAIL { background: var(--fail); } .bar.WARN { background: #d4a72c; } .bar.PASS { background: var(--pass); }
td.barcell { width: 30%; }
tr.culprit td { background: var(--bg-fail); }
)CSS";

bool exact(const TensorDiff& d) { return d.kind == TensorKind::exact || d.kind == TensorKind::routing; }

std::string badge(Verdict v, bool big = false) {
  return fmt::format("<span class=\"badge{} {}\">{}</span>", big ? " big" : "", verdict_name(v), verdict_name(v));
}

std::string cell(double v, const std::string& text) {
  const std::string key = std::isfinite(v) ? fmt::format("{}", v) : (v > 0 ? "1e308" : "-1e308");
  return fmt::format("<td class=\"num\" data-v=\"{}\">{}</td>", key, html_escape(text));
}

std::string error_cell(const WatchedError& w) {
  return cell(w.error(), exact(w.diff) ? fmt::format("{:.3g}%", 100 * w.error()) : num(w.error(), "{:.3e}"));
}

// The watched error of every probe in step order, log scale, with the FAIL line of the floor gate.
std::string trace_plot(const BisectReport& r) {
  if (r.trace.empty()) return "";
  const bool floor = !r.floor.empty();
  report::PlotSpec spec;
  spec.title = floor ? "watched error / the floor's on the same split, per mixed run (log10)"
                     : "watched error per mixed run (log10)";
  double lo = 0, hi = 0;
  bool first = true;
  std::vector<double> ys;
  for (const auto& p : r.trace) {
    const double v = floor ? p.watched.vs_floor() : p.watched.error();
    const double y = v > 0 && std::isfinite(v) ? std::log10(v) : NAN;
    ys.push_back(y);
    if (std::isfinite(y)) {
      lo = first ? y : std::min(lo, y);
      hi = first ? y : std::max(hi, y);
      first = false;
    }
  }
  if (floor) {
    const double k = std::log10(std::max(r.watch_thresholds.floor_k, 1e-12));
    lo = std::min(lo, k), hi = std::max(hi, k);
    spec.lines.push_back({k, fmt::format("FAIL above {:g}", r.watch_thresholds.floor_k), "fail"});
  }
  spec.y_lo = lo - 0.3, spec.y_hi = hi + 0.3;
  spec.min_step = 1.0;
  spec.tick = [](double y) { return fmt::format("1e{:.0f}", y); };
  for (std::size_t i = 0; i < r.trace.size(); ++i) {
    const Probe& p = r.trace[i];
    if (spec.bands.empty() || spec.bands.back().label != p.phase) spec.bands.push_back({i, i, p.phase});
    spec.bands.back().end = i + 1;
    const double y = std::isfinite(ys[i]) ? ys[i] : (ys[i] > 0 ? spec.y_hi : spec.y_lo);
    spec.points.push_back({std::clamp(y, spec.y_lo, spec.y_hi), p.verdict(),
                           fmt::format("step {}: {} - {}", p.step, p.split, verdict_name(p.verdict())),
                           fmt::format("#row-{}", p.step)});
  }
  return report::svg_plot(spec);
}

std::string trace_table(const BisectReport& r) {
  const bool floor = !r.floor.empty();
  std::string o = fmt::format(
      "<table id=\"stages\" class=\"sortable\"><thead><tr><th>step</th><th>phase</th><th>stages on the candidate</th>"
      "<th>error</th>{}<th>cosine</th><th>max_abs</th><th>max_abs_scaled</th><th>computed</th><th>reused</th>"
      "<th>cached</th><th>s</th><th>verdict</th><th>reason</th></tr></thead><tbody>\n",
      floor ? "<th>floor</th><th>ratio</th>" : "");
  for (const auto& p : r.trace) {
    const WatchedError& w = p.watched;
    o += fmt::format("<tr id=\"row-{}\" class=\"v{}\">", p.step, verdict_name(p.verdict()));
    o += cell(p.step, std::to_string(p.step));
    o += fmt::format("<td>{}</td><td>{}</td>", html_escape(p.phase), html_escape(p.split));
    o += error_cell(w);
    if (floor) {
      o += cell(w.budget_base(), exact(w.diff) ? fmt::format("{:.3g}%", 100 * w.budget_base()) : num(w.budget_base(), "{:.3e}"));
      o += cell(w.vs_floor(), num(w.vs_floor(), "{:.4g}"));
    }
    o += cell(w.diff.metrics.cosine, exact(w.diff) ? "exact" : report::cosine_text(w.diff.metrics.cosine));
    o += cell(w.diff.metrics.max_abs, exact(w.diff) ? "" : num(w.diff.metrics.max_abs, "{:.2e}"));
    o += cell(w.diff.metrics.max_abs_scaled, exact(w.diff) ? "" : num(w.diff.metrics.max_abs_scaled, "{:.2e}"));
    o += cell(static_cast<double>(p.computed), std::to_string(p.computed));
    o += cell(static_cast<double>(p.reused), std::to_string(p.reused));
    o += cell(static_cast<double>(p.cached), std::to_string(p.cached));
    o += cell(p.seconds, fmt::format("{:.2f}", p.seconds));
    o += fmt::format("<td data-v=\"{}\">{}</td><td class=\"reason\">{}</td></tr>\n", static_cast<int>(p.verdict()),
                     badge(p.verdict()), html_escape(w.diff.reason));
  }
  return o + "</tbody></table>\n";
}

std::string culprit_section(const BisectReport& r) {
  if (!r.search) return "";
  const SearchResult& s = *r.search;
  std::string o = "<h2>Culprits</h2>\n";
  if (!s.full_fails)
    return o + fmt::format("<p><b>Nothing crosses the threshold</b>: with every stage on the candidate, "
                           "<code>{}</code> passes (step 1).</p>\n",
                           html_escape(r.watch.key()));
  o += "<table><thead><tr><th>#</th><th>stage</th><th>class</th><th>stage number</th><th>bracketed by</th></tr></thead>"
       "<tbody>\n";
  int i = 0;
  for (const auto& c : s.culprits)
    o += fmt::format("<tr class=\"culprit\"><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"num\">{} of {}"
                     "</td><td>{} &rarr; <a href=\"#row-{}\">FAIL at step {}</a></td></tr>\n",
                     ++i, html_escape(c.stage), html_escape(c.cls), c.index + 1, r.stages,
                     c.pass_step ? fmt::format("<a href=\"#row-{0}\">PASS at step {0}</a>", c.pass_step)
                                 : std::string("PASS with no stage on the candidate"),
                     c.fail_step, c.fail_step);
  o += "</tbody></table>\n";
  if (s.passes_after) o += fmt::format("<p>With the culprit set on {}, the candidate passes.</p>\n", html_escape(r.rest));
  else if (s.capped) o += "<p>Stopped at the culprit limit; the candidate still fails with these pinned.</p>\n";
  return o;
}

std::string ranking_table(const BisectReport& r, const IsolationResult& iso, std::size_t top);

std::string isolation_section(const BisectReport& r) {
  if (!r.isolation) return "";
  const bool floor = !r.floor.empty();
  std::string o = fmt::format(
      "<h2>Isolation</h2>\n<p class=\"sub\">Every stage on the candidate with the reference's own inputs (read from the "
      "case), ranked by local error{}. {} stages in {:.2f} s, no reference recomputed.</p>\n",
      floor ? " relative to the floor candidate's local error of the same stage" : " (rel_l2)", r.isolation->ranked.size(),
      r.isolation->seconds);
  return o + ranking_table(r, *r.isolation, r.isolation->ranked.size());
}

// A search that found nothing: where to look next.
std::string leads_section(const BisectReport& r) {
  if (!r.leads) return "";
  std::string o = fmt::format(
      "<h2>Inconclusive: where to look</h2>\n<p>No split crosses the threshold on <code>{}</code>. The stages whose "
      "local error {} most, each run on the reference's own inputs (the {} largest of {}):</p>\n",
      html_escape(r.watch.key()), r.floor.empty() ? "is largest (rel_l2)" : "exceeds the floor candidate's",
      std::min<std::size_t>(5, r.leads->ranked.size()), r.leads->ranked.size());
  o += ranking_table(r, *r.leads, 5);
  if (!r.next_command.empty())
    o += fmt::format("<p><b>Next.</b> {}</p>\n<pre>{}</pre>\n", html_escape(r.next_reason), html_escape(r.next_command));
  return o;
}

std::string story_section(const BisectReport& r) {
  std::string o;
  for (const auto& line : divergence_story(r)) o += fmt::format("<p class=\"legend\">Why: {}</p>\n", html_escape(line));
  return o;
}

std::string ranking_table(const BisectReport& r, const IsolationResult& iso, std::size_t top) {
  const bool floor = !r.floor.empty();
  std::string o;
  o += fmt::format("<table><thead><tr><th>rank</th><th>stage</th><th>tensor</th><th>cosine</th><th>rmse</th>{}<th>{}"
                   "</th><th>verdict</th><th>reason</th></tr></thead><tbody>\n",
                   floor ? "<th>floor error</th>" : "", floor ? "ratio" : "rel_l2");
  std::size_t rank = 0;
  for (const auto& s : iso.ranked) {
    if (rank >= top) break;
    const TensorDiff& d = s.worst;
    o += fmt::format("<tr class=\"v{}\"><td class=\"num\">{}</td><td><code>{}</code></td><td><code>{}</code></td>",
                     verdict_name(d.verdict), ++rank, html_escape(s.stage), html_escape(d.tensor));
    o += cell(d.metrics.cosine, exact(d) ? "exact" : report::cosine_text(d.metrics.cosine));
    o += cell(d.metrics.rmse, exact(d) ? "" : num(d.metrics.rmse, "{:.3e}"));
    if (floor) o += cell(s.floor_error.value_or(0), s.floor_error ? num(*s.floor_error, "{:.3e}") : "");
    o += cell(s.score, num(s.score, "{:.3g}"));
    o += fmt::format("<td>{}</td><td class=\"reason\">{}</td></tr>\n", badge(d.verdict), html_escape(d.reason));
  }
  return o + "</tbody></table>\n";
}

std::string attribution_section(const BisectReport& r) {
  if (!r.attribution) return "";
  const AttributionResult& a = *r.attribution;
  const bool floor = !r.floor.empty();
  std::string o = fmt::format(
      "<h2>Attribution by {}</h2>\n<p class=\"sub\">Each {} alone on the candidate, every other stage on {}. "
      "share = its watched error&sup2; / the sum over all classes of error&sup2; (independent errors add in quadrature); "
      "alone/all = its error / the all-candidate run's ({}). The classes' errors in quadrature come to {} &times; the "
      "all-candidate error{}.</p>\n",
      grouping_name(a.by), grouping_name(a.by), html_escape(r.rest), num(a.all_error, "{:.3e}"), num(a.quadrature, "{:.3g}"),
      std::abs(a.quadrature - 1) > 0.25 ? ": the classes interact (near-tie routing flips, cancellation)" : "");
  o += fmt::format("<table><thead><tr><th>{}</th><th>stages</th><th>error</th><th>share</th><th></th><th>alone/all</th>"
                   "{}{}<th>verdict</th></tr></thead><tbody>\n",
                   grouping_name(a.by), floor ? "<th>vs floor</th>" : "",
                   r.trace.front().watched.diff.logits ? "<th>top-1 agree</th><th>KL mean</th>" : "");
  double top = 0;
  for (const auto& c : a.rows) top = std::max(top, c.share);
  for (const auto& c : a.rows) {
    o += fmt::format("<tr><td><code>{}</code></td><td class=\"num\">{}</td>", html_escape(c.group), c.stages);
    o += error_cell(c.watched);
    o += cell(c.share, fmt::format("{:.1f}%", 100 * c.share));
    o += fmt::format("<td class=\"barcell\"><div class=\"bar {}\" style=\"width:{:.1f}%\"></div></td>",
                     verdict_name(c.watched.diff.verdict), top > 0 ? 100 * c.share / top : 0.0);
    o += cell(c.vs_all, num(c.vs_all, "{:.3g}"));
    if (floor) o += cell(c.watched.vs_floor(), num(c.watched.vs_floor(), "{:.3g}"));
    if (const auto& l = c.watched.diff.logits)
      o += cell(l->top1_agree, fmt::format("{:.2f}%", 100 * l->top1_agree)) + cell(l->kl_mean, num(l->kl_mean, "{:.2e}"));
    else if (r.trace.front().watched.diff.logits)
      o += "<td></td><td></td>";
    o += fmt::format("<td>{}</td></tr>\n", badge(c.watched.diff.verdict));
  }
  return o + "</tbody></table>\n";
}

}  // namespace

std::string render_bisect_html(const BisectReport& r) {
  const std::string title = r.info.title.empty() ? "tdiff bisect: " + r.info.case_name : r.info.title;
  const Verdict v = r.exit_code() ? Verdict::fail : Verdict::pass;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += fmt::format("<title>{}</title>\n<style>{}{}</style></head>\n<body><main>\n", html_escape(title), report::kHtmlStyle,
                   kExtraStyle);
  o += fmt::format("<div class=\"head\">{}<div><h1>{}</h1><p class=\"sub\">candidate <code>{}</code>{}</p>"
                   "<p class=\"sub\">case <b>{}</b> &middot; run <code>{}</code> &middot; tdiff {}</p></div></div>\n",
                   badge(v, true), html_escape(title), html_escape(r.candidate),
                   r.floor.empty() ? "" : " &middot; floor <code>" + html_escape(r.floor) + "</code>",
                   html_escape(r.info.case_name), html_escape(r.info.run_id), TDIFF_VERSION);
  const BisectTotals& t = r.totals;
  o += "<div class=\"cards\">\n";
  o += fmt::format("<div class=\"card\"><div class=\"k\">result</div><div class=\"v\">{}</div></div>\n",
                   html_escape(r.outcome()));
  o += fmt::format("<div class=\"card\"><div class=\"k\">watched</div><div class=\"v\"><code>{}</code><br><span "
                   "class=\"sub\">stage {} of the model; {} stages can matter</span></div></div>\n",
                   html_escape(r.watch.key()), r.watch.index + 1, r.stages);
  o += fmt::format("<div class=\"card\"><div class=\"k\">cost</div><div class=\"v\">{} mixed runs{}{}<br><span "
                   "class=\"sub\">stages computed {}, read from the case {}, from earlier runs {}; {:.2f} s</span></div>"
                   "</div>\n</div>\n",
                   t.mixed_runs, t.floor_runs ? fmt::format(" + {} floor run{}", t.floor_runs, t.floor_runs == 1 ? "" : "s") : "",
                   t.isolated_runs ? fmt::format(", {} isolated stage runs", t.isolated_runs) : "", t.computed, t.reused,
                   t.cached, t.seconds);
  o += fmt::format("<p><b>Rule.</b> {}.</p>\n", html_escape(watch_rule(r)));
  for (const auto& n : r.notes) o += fmt::format("<p class=\"legend\">Note: {}.</p>\n", html_escape(n));
  if (r.has_run_report)
    o += "<p>The all-candidate run, every stage compared: <a href=\"report.html\">report.html</a>.</p>\n";
  o += culprit_section(r);
  o += story_section(r);
  if (!r.trace.empty()) {
    o += "<h2>Search trace</h2>\n" + trace_plot(r);
    o += fmt::format("<p class=\"legend\">One point per mixed run in step order. full: every stage up to the watched one on "
                     "the candidate; search: stages 1..k on the candidate, the rest on {0}; verify: the culprits found so "
                     "far pinned to {0}; class: one operator class on the candidate.</p>\n",
                     html_escape(r.rest));
    o += "<div class=\"tools\"><label><input type=\"checkbox\" id=\"only-bad\"> show only WARN and FAIL</label>"
         "<span>click a column to sort</span></div>\n";
    o += trace_table(r);
  }
  o += isolation_section(r);
  o += leads_section(r);
  o += attribution_section(r);
  o += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(r.info.command.empty() ? "(not recorded)" : r.info.command));
  o += report::env_section(r.info.env);
  o += fmt::format("</main>\n<script>{}</script>\n</body></html>\n", report::kHtmlScript);
  return o;
}

}  // namespace tdiff
