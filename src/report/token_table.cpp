#include "report/token_table.h"

#include <fmt/format.h>

#include "report/summary.h"

namespace tdiff::report {

namespace {

constexpr std::size_t kMatchRowsShown = 64;

const char* verdict_colour(TokenVerdict v) {
  switch (v) {
    case TokenVerdict::match: return "#1e8449";
    case TokenVerdict::drift: return "#b9770e";
    case TokenVerdict::tie_flip: return "#2874a6";
    case TokenVerdict::wrong: return "#c0392b";
  }
  return "#000";
}

std::string table_of(const std::string& key, const TokenSteps& t) {
  std::string o = fmt::format(
      "<h3>Generated tokens: <code>{}</code></h3>\n<p class=\"sub\">{}. Teacher-forced: every step's input is the "
      "case's token. Bound: the logits' expected error at the FAIL ratio, twice over (two logits).</p>\n"
      "<table class=\"depth\"><thead><tr><th>step</th><th>row</th><th>position</th><th>verdict</th><th>reference "
      "token</th><th>candidate token</th><th>reference gap</th><th>bound</th><th>log p (ref)</th><th>log p "
      "(cand)</th></tr></thead><tbody>\n",
      html_escape(key), html_escape(token_summary(t)));
  std::size_t matches = 0, hidden = 0;
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const TokenStep& st = t.steps[i];
    if (st.verdict == TokenVerdict::match && ++matches > kMatchRowsShown) {
      ++hidden;
      continue;
    }
    o += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td style=\"color:{};font-weight:bold\">{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        static_cast<std::int64_t>(i) % t.steps_per_row, st.row, st.pos, verdict_colour(st.verdict),
        token_verdict_name(st.verdict), st.ref_token, st.cand_token, num(st.ref_gap), t.bounded ? num(st.bound) : "-",
        num(st.logprob_ref, "{:.4g}"), num(st.logprob_cand, "{:.4g}"));
  }
  if (hidden) o += fmt::format("<tr><td colspan=\"10\">({} more MATCH steps not shown)</td></tr>\n", hidden);
  return o + "</tbody></table>\n";
}

}  // namespace

std::string token_table_html(const CompareResult& r) {
  std::string o;
  for (const auto& row : r.rows)
    if (row.tokens) o += table_of(row.key(), *row.tokens);
  return o;
}

}  // namespace tdiff::report
