// audit.html: the precision audit as one self-contained page (inline CSS, SVG, a little JS).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/version.h"
#include "report/audit_report.h"
#include "report/html_style.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::html_escape;
using report::num;

std::string cell(double sort_key, const std::string& text) {
  const std::string key = std::isnan(sort_key) ? "-1e308" : std::isinf(sort_key) ? "1e308" : fmt::format("{}", sort_key);
  return fmt::format("<td class=\"num\" data-v=\"{}\">{}</td>", key, html_escape(text));
}

double local_value(const AuditSide& s, bool selection) {
  if (selection) return static_cast<double>(s.local.selection_tokens);
  return s.local.nonfinite > 0 ? INFINITY : s.local.rel_l2;
}

// Horizontal bars of log10(factor), one per knob: how much each fix buys locally.
std::string factor_chart(const AuditResult& r) {
  const double row_h = 18, left = 150, width = 900, plot_w = width - left - 70;
  double hi = 1;  // decades shown
  for (const auto& row : r.rows)
    if (std::isfinite(row.factor) && row.factor > 0) hi = std::max(hi, std::ceil(std::log10(row.factor)));
  hi = std::min(hi, 6.0);
  const double lo = -1;  // a factor below 1 (the bad setting is better) shows left of the axis
  auto x_of = [&](double decade) { return left + (decade - lo) / (hi - lo) * plot_w; };
  const double h = 30 + row_h * static_cast<double>(r.rows.size());
  std::string o = fmt::format("<svg class=\"plot\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"local improvement "
                              "factor per knob\">\n<text class=\"ptitle\" x=\"{}\" y=\"14\">local improvement factor "
                              "bad / good (log scale)</text>\n",
                              width, h, left);
  for (double d = lo; d <= hi; d += 1)
    o += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"22\" y2=\"{1}\"/><text class=\"tick\" "
                     "x=\"{0:.1f}\" y=\"{2}\" style=\"text-anchor:middle\">{3}x</text>\n",
                     x_of(d), h - 4, h, num(std::pow(10.0, d), "{:g}"));
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    const double y = 24 + row_h * static_cast<double>(i);
    const double f = row.factor;
    const double decade = std::isinf(f) ? hi : f > 0 ? std::clamp(std::log10(f), lo, hi) : lo;
    const double x0 = x_of(0), x1 = x_of(decade);
    const std::string css = f >= 2 ? "pt fail" : f > 1.05 ? "pt warn" : "pt pass";
    o += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\">{}</text>", left - 6, y + 12, html_escape(row.knob.name));
    if (!row.skipped.empty()) {
      o += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" style=\"text-anchor:start\">skipped</text>\n",
                       x0 + 4, y + 12);
      continue;
    }
    if (row.knob.paper_factor > 0) {  // the paper's factor: a dotted mark across the bar
      const double xp = x_of(std::clamp(std::log10(row.knob.paper_factor), lo, hi));
      o += fmt::format("<line class=\"marker\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\"><title>paper: "
                       "{3}</title></line>",
                       xp, y, y + row_h - 1, audit_paper_text(row.knob));
    }
    o += fmt::format("<rect class=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\"><title>{}: {}</title>"
                     "</rect>",
                     css, std::min(x0, x1), y + 2, std::max(std::fabs(x1 - x0), 1.0), row_h - 5,
                     html_escape(row.knob.name), audit_factor_text(f));
    o += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" style=\"text-anchor:start\">{}{}</text>\n",
                     std::max(x0, x1) + 4, y + 12, audit_factor_text(f), row.selection ? " (tokens)" : "");
  }
  return o + "</svg>\n";
}

// The knob table. Its headers wrap and the bad setting's effect lives in the knob's details,
// so the table fits the page; without full runs the end-to-end and run-to-run columns go.
std::string main_table(const AuditResult& r) {
  const bool full = audit_ran_full(r);
  std::string o = "<table id=\"audit\" class=\"sortable\"><thead><tr><th>knob</th><th>bad &rarr; good</th>"
                  "<th>stages</th><th>local bad</th><th>local good</th><th>factor</th><th>paper</th>";
  if (full)
    o += "<th>logits rel_l2 bad</th><th>logits rel_l2 good</th><th>top-1 bad</th><th>top-1 good</th><th>run to run "
         "bad</th><th>run to run good</th>";
  o += "</tr></thead><tbody>\n";
  for (const auto& row : r.rows) {
    auto e2e = [&](const AuditSide& s) {
      return s.ran_full ? cell(s.full.logits.metrics.rel_l2, num(s.full.logits.metrics.rel_l2, "{:.2e}"))
                        : cell(NAN, "");
    };
    auto top1 = [&](const AuditSide& s) {
      if (!s.ran_full || !s.full.logits.logits) return cell(NAN, "");
      const double v = s.full.logits.logits->top1_agree;
      return cell(v, fmt::format("{:.2f}%", 100 * v));
    };
    auto r2r = [&](const AuditSide& s) {
      if (!s.ran_full) return cell(NAN, "");
      return cell(static_cast<double>(s.r2r.tensors_differ + s.r2r.selection_tokens),
                  fmt::format("{} tensors, {} tokens", s.r2r.tensors_differ, s.r2r.selection_tokens));
    };
    o += fmt::format("<tr><td><a href=\"#k-{0}\"><code>{0}</code></a></td><td><code>{1}</code> &rarr; <code>{2}</code>"
                     "</td>",
                     html_escape(row.knob.name), html_escape(row.knob.bad), html_escape(row.knob.good));
    o += cell(static_cast<double>(row.touched), std::to_string(row.touched));
    const double paper = row.knob.paper_factor > 0 ? row.knob.paper_factor : NAN;
    if (!row.skipped.empty()) {  // every cell kept, so that the columns still sort; the reason is in the details
      o += cell(NAN, "skipped") + cell(NAN, "") + cell(NAN, "") + cell(paper, audit_paper_text(row.knob));
      for (int i = 0; full && i < 6; ++i) o += cell(NAN, "");
      o += "</tr>\n";
      continue;
    }
    o += cell(local_value(row.bad, row.selection), audit_local_text(row.bad, row.selection));
    o += cell(local_value(row.good, row.selection), audit_local_text(row.good, row.selection));
    o += cell(row.factor, audit_factor_text(row.factor));
    o += cell(paper, audit_paper_text(row.knob));
    if (full) o += e2e(row.bad) + e2e(row.good) + top1(row.bad) + top1(row.good) + r2r(row.bad) + r2r(row.good);
    o += "</tr>\n";
  }
  return o + "</tbody></table>\n";
}

std::string details(const AuditResult& r) {
  std::string o;
  for (const auto& row : r.rows) {
    o += fmt::format("<details id=\"k-{0}\"><summary><code>{0}</code> = <code>{1}</code> vs <code>{2}</code>: {3} "
                     "stages, {4}</summary>\n",
                     html_escape(row.knob.name), html_escape(row.knob.bad), html_escape(row.knob.good), row.touched,
                     row.skipped.empty() ? "factor " + audit_factor_text(row.factor) : "skipped");
    o += fmt::format("<p class=\"legend\">What the bad setting does: {}</p>\n", html_escape(row.knob.effect));
    if (!row.skipped.empty()) {
      o += fmt::format("<p class=\"legend\">Not measured: {}.</p>\n</details>\n", html_escape(row.skipped));
      continue;
    }
    o += "<table><thead><tr><th>stage</th><th>tensor</th><th>bad</th><th>good</th><th>bad / good</th></tr></thead>"
         "<tbody>\n";
    for (std::size_t i = 0; i < row.bad.local.rows.size() && i < row.good.local.rows.size(); ++i) {
      const TensorDiff &b = row.bad.local.rows[i], &g = row.good.local.rows[i];
      auto value = [](const TensorDiff& d) {
        if (d.routing) return static_cast<double>(d.routing->tokens - d.routing->equal_tokens);
        return d.metrics.new_nonfinite > 0 ? INFINITY : d.metrics.rel_l2;
      };
      auto text = [](const TensorDiff& d) {
        if (d.routing) return fmt::format("{} tokens", d.routing->tokens - d.routing->equal_tokens);
        return d.metrics.new_nonfinite > 0 ? fmt::format("{} NaN/Inf", d.metrics.new_nonfinite)
                                           : num(d.metrics.rel_l2, "{:.3e}");
      };
      const double vb = value(b), vg = value(g);
      const double ratio = vg > 0 ? vb / vg : (vb > 0 ? INFINITY : 1.0);
      o += fmt::format("<tr><td><code>{}</code></td><td><code>{}</code></td>", html_escape(b.stage), html_escape(b.tensor));
      o += cell(vb, text(b)) + cell(vg, text(g)) + cell(ratio, audit_factor_text(ratio)) + "</tr>\n";
    }
    o += "</tbody></table>\n";
    auto r2r_line = [&](const char* label, const AuditSide& s) -> std::string {
      if (!s.ran_full) return "";
      return fmt::format("<p class=\"legend\">{} setting, two run seeds: {} of {} stage outputs differ bit-wise{}; {} "
                         "tokens select differently.</p>\n",
                         label, s.r2r.tensors_differ, s.r2r.tensors,
                         s.r2r.first_differing.empty() ? "" : " (first: <code>" + html_escape(s.r2r.first_differing) + "</code>)",
                         s.r2r.selection_tokens);
    };
    o += r2r_line("bad", row.bad) + r2r_line("good", row.good) + "</details>\n";
  }
  return o;
}

constexpr const char* kSortScript = R"JS(
(function () {
  var table = document.getElementById('audit');
  var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.addEventListener('click', function () {
      var dir = th.classList.contains('asc') ? -1 : 1;
      Array.prototype.forEach.call(heads, function (h) { h.classList.remove('asc', 'desc'); });
      th.classList.add(dir > 0 ? 'asc' : 'desc');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v'), y = b.cells[col].getAttribute('data-v');
        if (x === null) return dir * a.cells[col].textContent.localeCompare(b.cells[col].textContent);
        return dir * (parseFloat(x) - parseFloat(y));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
})();
)JS";

}  // namespace

std::string render_audit_html(const AuditResult& r, const RunInfo& info) {
  const std::string title = info.title.empty() ? "tdiff audit: " + info.case_name : info.title;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // The knob table's headers wrap, so that its columns fit the page.
  o += fmt::format("<title>{}</title>\n<style>{}#audit th {{ white-space: normal; }}</style></head>\n<body><main>\n",
                   html_escape(title), report::kHtmlStyle);
  o += fmt::format("<h1>{}</h1><p class=\"sub\">knobs flipped on <code>{}</code> &middot; case <b>{}</b> &middot; run "
                   "<code>{}</code> &middot; tdiff {} &middot; {:.1f} s</p>\n",
                   html_escape(title), html_escape(r.policy), html_escape(info.case_name), html_escape(info.run_id),
                   TDIFF_VERSION, r.seconds);
  o += "<h2>The fault catalog, measured</h2>\n" + factor_chart(r) + main_table(r);
  o += "<p class=\"legend\"><b>local</b>: the relative L2 error of every stage the knob touches, each run on the "
       "reference's own inputs (so upstream error does not mix in), all touched tensors taken together; for top-k "
       "knobs the tokens whose selection differs from the reference (ties included). <b>factor</b> = bad / good. "
       "<b>logits</b>, <b>top-1</b>: a full candidate run at each setting against the reference (not run with "
       "--no-full-runs). <b>run to run</b>: two full runs with different run seeds: stage outputs that are not "
       "bit-identical, and tokens whose expert or indexer selection differs. <b>paper</b>: the factor the "
       "FlashAttention-on-MI250 port the method came from measured (the dotted marks in the chart); it also reports "
       "run-to-run routing differences removed by fp32 comparison with ties broken by expert id. What each bad "
       "setting does: in its details below.</p>\n";
  o += "<h2>Per stage</h2>\n" + details(r);
  o += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(info.command.empty() ? "(not recorded)" : info.command));
  o += report::env_section(info.env);
  o += fmt::format("</main>\n<script>{}</script>\n</body></html>\n", kSortScript);
  return o;
}

}  // namespace tdiff
