// Summary table, junit.xml and index.html of a `tdiff ci` run (report/ci_index.h).
#include "report/ci_index.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/version.h"
#include "report/html_style.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::html_escape;

std::string opt_num(const std::optional<double>& v, const char* spec) { return v ? report::num(*v, spec) : "-"; }

std::string cosine_cell(const std::optional<double>& v) { return v ? report::cosine_text(*v) : "-"; }

using report::xml_escape;

std::string determinism_text(const CiRow& r) {
  if (r.runs < 2) return "not checked";
  return r.deterministic ? fmt::format("yes ({} runs)", r.runs) : fmt::format("NO ({} runs)", r.runs);
}

}  // namespace

Verdict CiSummary::verdict() const {
  Verdict v = Verdict::pass;
  for (const auto& r : rows) v = worst(v, r.verdict);
  return v;
}

std::string render_ci_table(const CiSummary& s, bool color) {
  auto paint = [&](Verdict v) {
    const std::string name = verdict_name(v);
    if (!color) return name;
    const char* code = v == Verdict::fail ? "31" : v == Verdict::warn ? "33" : "32";
    return fmt::format("\033[1;{}m{}\033[0m", code, name);
  };
  // A model column only for a suite whose cases run on more than its [model].
  std::size_t model_width = 0;
  for (const auto& r : s.rows)
    if (!r.model.empty()) model_width = std::max({model_width, r.model.size() + 1, std::string("model").size() + 1});
  auto model_cell = [&](const std::string& m) { return model_width ? fmt::format("{:<{}}", m, model_width) : ""; };
  std::size_t inputs_width = 24;  // wider where a generation case names its schedule
  for (const auto& r : s.rows) inputs_width = std::max(inputs_width, r.inputs.size());
  std::string out = fmt::format("tdiff ci {}: {}\n", s.suite, s.candidate);
  out += fmt::format("  {:<16} {}{:<{}} {:<7} {:>11} {:>6} {:>8} {:>14} {:>7}\n", "case", model_cell("model"), "inputs",
                     inputs_width, "verdict", "logits cos", "top-1", "KL max", "deterministic", "time");
  int counts[3] = {0, 0, 0};
  for (const auto& r : s.rows) {
    ++counts[static_cast<int>(r.verdict)];
    const std::string v = paint(r.verdict);
    out += fmt::format("  {:<16} {}{:<{}} {}{:<{}} {:>11} {:>6} {:>8} {:>14} {:>6.1f}s\n", r.name,
                       model_cell(r.model.empty() ? "-" : r.model), r.inputs, inputs_width, v, "",
                       7 - std::string(verdict_name(r.verdict)).size(), cosine_cell(r.logits_cosine),
                       opt_num(r.logits_top1, "{:.3f}"), opt_num(r.logits_kl_max, "{:.3g}"), determinism_text(r),
                       r.seconds);
    if (!r.reason.empty()) out += fmt::format("      {}\n", r.reason);
  }
  out += fmt::format("verdict {}: {} PASS, {} WARN, {} FAIL of {} cases in {:.1f} s\n", paint(s.verdict()), counts[0],
                     counts[1], counts[2], s.rows.size(), s.seconds);
  return out;
}

std::string render_ci_junit(const CiSummary& s) {
  int failures = 0;
  for (const auto& r : s.rows) failures += r.verdict == Verdict::fail;
  const std::string suite = xml_escape("tdiff.ci." + s.suite);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"tdiff ci\" tests=\"{}\" failures=\"{}\" time=\"{:.3f}\">\n", s.rows.size(),
                     failures, s.seconds);
  out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\">\n",
                     suite, s.rows.size(), failures, s.seconds);
  out += "    <properties>\n";
  out += fmt::format("      <property name=\"command\" value=\"{}\"/>\n", xml_escape(s.command));
  out += fmt::format("      <property name=\"candidate\" value=\"{}\"/>\n", xml_escape(s.candidate));
  out += fmt::format("      <property name=\"thresholds\" value=\"{}\"/>\n", xml_escape(s.thresholds_file));
  for (const auto& [k, v] : s.env)
    out += fmt::format("      <property name=\"env.{}\" value=\"{}\"/>\n", xml_escape(k), xml_escape(v));
  out += "    </properties>\n";
  for (const auto& r : s.rows) {
    const std::string detail =
        fmt::format("{} {}: {} tensors ({} FAIL, {} WARN); logits cosine {}, top-1 {}, KL max {}; deterministic: {}\n"
                    "report: {}\ncase: {} (run {})\n{}",
                    verdict_name(r.verdict), r.name, r.tensors, r.fails, r.warns, cosine_cell(r.logits_cosine),
                    opt_num(r.logits_top1, "{:.3f}"), opt_num(r.logits_kl_max, "{:.3g}"), determinism_text(r), r.report,
                    r.case_file, r.run_id, r.reason);
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n", suite, xml_escape(r.name), r.seconds);
    if (r.verdict == Verdict::fail)
      out += fmt::format("      <failure message=\"{}\" type=\"FAIL\">{}</failure>\n", xml_escape(r.reason),
                         xml_escape(detail));
    out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(detail));
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string render_ci_index(const CiSummary& s) {
  const Verdict v = s.verdict();
  auto badge = [](Verdict x) { return fmt::format("<span class=\"badge {0}\">{0}</span>", verdict_name(x)); };
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>tdiff ci {} — {}</title>\n", html_escape(s.suite), verdict_name(v));
  h += fmt::format("<style>{}</style></head><body><main>\n", report::kHtmlStyle);
  h += fmt::format("<div class=\"head\"><h1>tdiff ci {}</h1><span class=\"badge big {}\">{}</span></div>\n",
                   html_escape(s.suite), verdict_name(v), verdict_name(v));
  h += fmt::format("<p class=\"sub\">{}</p>\n<p class=\"sub\">candidate: {} · {} cases in {:.1f} s · {}</p>\n",
                   html_escape(s.description), html_escape(s.candidate), s.rows.size(), s.seconds, html_escape(s.cache));
  h += "<h2>Cases</h2>\n<table class=\"rows\"><thead><tr><th>case</th><th>inputs</th><th>verdict</th>"
       "<th>tensors</th><th>logits cosine</th><th>top-1</th><th>KL max</th><th>deterministic</th><th>time</th>"
       "<th>why</th></tr></thead><tbody>\n";
  for (const auto& r : s.rows) {
    std::string det = html_escape(determinism_text(r));
    if (!r.determinism_report.empty())
      det = fmt::format("<a href=\"{}\">{}</a>", html_escape(r.determinism_report), det);
    h += fmt::format(
        "<tr><td><a href=\"{}\">{}</a><div class=\"sub\">{}</div></td><td>{}{}</td><td>{}</td>"
        "<td class=\"num\">{} ({} FAIL, {} WARN)</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td>{}</td><td class=\"num\">{:.1f} s</td><td>{}</td></tr>\n",
        html_escape(r.report), html_escape(r.name), html_escape(r.about), html_escape(r.inputs),
        r.model.empty() ? "" : fmt::format("<div class=\"sub\">model {}</div>", html_escape(r.model)), badge(r.verdict),
        r.tensors, r.fails, r.warns, html_escape(cosine_cell(r.logits_cosine)),
        html_escape(opt_num(r.logits_top1, "{:.3f}")), html_escape(opt_num(r.logits_kl_max, "{:.3g}")), det, r.seconds,
        html_escape(r.reason));
  }
  h += "</tbody></table>\n";
  h += "<h2>What gates a case</h2>\n<p>A case fails when a tensor fails its threshold under the file below, or when "
       "the candidate's runs (each with its own run seed) are not bit-identical. Every tensor's metrics are in the "
       "case's report.</p>\n";
  h += fmt::format("<h3>{}</h3>\n<pre>{}</pre>\n",
                   html_escape(s.thresholds_file.empty() ? "default thresholds (diff/README.md)" : s.thresholds_file),
                   html_escape(s.thresholds_text));
  h += fmt::format("<h2>Reproduce</h2>\n<pre>{}</pre>\n", html_escape(s.command));
  h += report::env_section(s.env);
  h += fmt::format("<p class=\"sub\">tdiff {} ({})</p>\n</main></body></html>\n", TDIFF_VERSION, TDIFF_GIT_COMMIT);
  return h;
}

}  // namespace tdiff
