// junit.xml: one testcase per stage, so that CI systems show which stage broke.
#include <fmt/format.h>

#include "report/report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::xml_escape;

std::string tensor_line(const CompareResult& r, const TensorDiff& d) {
  const std::string where = report::where_text(r, d);
  return fmt::format("{} {}: {} cosine={} max_abs={} max_abs_scaled={} rmse={} rel_l2={} expected={} ratio={}{}{}",
                     verdict_name(d.verdict), d.key(), d.reason.empty() ? "ok" : d.reason,
                     report::cosine_text(d.metrics.cosine), report::num(d.metrics.max_abs),
                     report::num(d.metrics.max_abs_scaled), report::num(d.metrics.rmse), report::num(d.metrics.rel_l2),
                     report::expected_text(d), report::ratio_text(d),
                     d.floor_rmse ? " floor_rmse=" + report::num(*d.floor_rmse) : "",
                     where.empty() ? "" : " " + where);
}

}  // namespace

std::string render_junit(const CompareResult& r, const RunInfo& info) {
  const auto stages = report::summarize_stages(r);
  int failures = 0;
  for (const auto& s : stages) failures += s.verdict == Verdict::fail;
  const auto missing = r.only_ref.size() + r.only_cand.size();
  const std::string suite = xml_escape("tdiff." + info.case_name);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"tdiff\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n",
                     stages.size() + missing, failures, missing);
  out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n", suite,
                     stages.size() + missing, failures, missing);
  out += "    <properties>\n";
  out += fmt::format("      <property name=\"verdict\" value=\"{}\"/>\n", xml_escape(report::verdict_line(r)));
  out += fmt::format("      <property name=\"command\" value=\"{}\"/>\n", xml_escape(info.command));
  out += fmt::format("      <property name=\"reference\" value=\"{}\"/>\n", xml_escape(r.label_ref));
  out += fmt::format("      <property name=\"candidate\" value=\"{}\"/>\n", xml_escape(r.label_cand));
  for (const auto& [k, v] : info.env)
    out += fmt::format("      <property name=\"env.{}\" value=\"{}\"/>\n", xml_escape(k), xml_escape(v));
  out += "    </properties>\n";
  for (const auto& s : stages) {
    std::string lines;
    for (auto i : s.rows) lines += tensor_line(r, r.rows[i]) + "\n";
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\">\n", suite, xml_escape(s.stage));
    if (s.verdict == Verdict::fail)
      out += fmt::format("      <failure message=\"{}\" type=\"FAIL\">{}</failure>\n", xml_escape(s.reason),
                         xml_escape(lines));
    out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(lines));
    out += "    </testcase>\n";
  }
  auto skipped = [&](const std::vector<std::string>& keys, const char* why) {
    for (const auto& k : keys)
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\">\n      <skipped message=\"{}\"/>\n"
                         "    </testcase>\n",
                         suite, xml_escape(k), why);
  };
  skipped(r.only_ref, "only in the reference");
  skipped(r.only_cand, "only in the candidate");
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace tdiff
