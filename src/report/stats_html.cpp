// The model statistics section of report.html (tdiff run): its own file, so the run report's
// other sections change without touching it.
#include <cmath>

#include <fmt/format.h>

#include "report/stats_report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

std::string cell(double v, const char* f) { return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : "&ndash;"; }

std::string stats_row(const LayerStats& l) {
  std::string o = fmt::format("<tr><td>L{:02d}</td><td>{}</td><td class=\"num\">{}</td>", l.layer, report::html_escape(l.type),
                              cell(l.max_logit, "{:.1f}"));
  for (double v : {l.entropy.p10, l.entropy.p50, l.entropy.p90}) o += "<td class=\"num\">" + cell(v, "{:.2f}") + "</td>";
  o += fmt::format("<td class=\"num\">{}</td><td class=\"num\">{}%</td><td class=\"num\">{}</td>", cell(l.sink_mass, "{:.2f}"),
                   cell(100 * l.sink_heads, "{:.0f}"), cell(l.first_mass, "{:.3f}"));
  o += fmt::format("<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>", cell(l.act_max, "{:.4g}"),
                   cell(l.act_median, "{:.3f}"), cell(l.act_ratio, "{:.0f}"));
  for (double v : {l.margin.p10, l.margin.p50, l.margin.p90})
    o += "<td class=\"num\">" + (l.routed ? cell(v, "{:.2e}") : std::string("hash")) + "</td>";
  return o + "</tr>\n";
}

}  // namespace

std::string render_stats_html(const ModelStats& m) {
  std::string o = fmt::format(
      "<section id=\"model-stats\"><h2>Model statistics (float64 reference)</h2>\n<p class=\"sub\">How sharp the "
      "attention, how large the activations and how close the router's choices are on this case's {} real tokens: "
      "where low-precision kernels lose accuracy. <code>tdiff stats CASE</code> prints the same table for any case, "
      "including one made from a real checkpoint.</p>\n",
      m.tokens);
  o += "<table class=\"stats\"><thead><tr><th>layer</th><th>type</th><th>max |logit|</th><th>entropy p10</th><th>p50</th><th>p90</th>"
       "<th>sink mass</th><th>sink heads</th><th>first token</th><th>max |x|</th><th>median |x|</th><th>max/median</th>"
       "<th>margin p10</th><th>p50</th><th>p90</th></tr></thead><tbody>\n";
  for (const auto& l : m.layers) o += stats_row(l);
  o += "</tbody></table>\n<p class=\"legend\">max |logit|: pre-softmax attention logit, scaled by 1/sqrt(d). Entropy "
       "in nats over (query token, head), the learned sink counted as one outcome. Sink mass: mean probability on the "
       "sink; sink heads: heads whose mean sink probability is at least 0.5; first token: mean probability on the "
       "row's first token. |x|: the layer's output streams (hc_ffn.post). Margin: k-th minus (k+1)-th score + bias "
       "(hash layers choose by token id).</p></section>\n";
  return o;
}

}  // namespace tdiff
