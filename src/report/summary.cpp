#include "report/summary.h"


#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "diff/divergence.h"
#include "diff/location.h"
#include "diff/step_errors.h"

namespace tdiff::report {

std::vector<StageSummary> summarize_stages(const CompareResult& r) {
  std::vector<StageSummary> out;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    if (out.empty() || out.back().stage != d.stage) {
      StageSummary s;
      s.stage = d.stage;
      s.layer = stage_layer(d.stage);
      out.push_back(std::move(s));
    }
    StageSummary& s = out.back();
    s.rows.push_back(i);
    if (d.verdict > s.verdict || (s.reason.empty() && d.verdict != Verdict::pass)) s.reason = d.reason;
    s.verdict = worst(s.verdict, d.verdict);
    if (d.kind == TensorKind::values || d.kind == TensorKind::logits) {
      s.cosine = s.has_values ? std::min(s.cosine, d.metrics.cosine) : d.metrics.cosine;
      s.max_abs = s.has_values ? std::max(s.max_abs, d.metrics.max_abs) : d.metrics.max_abs;
      s.max_abs_scaled =
          s.has_values ? std::max(s.max_abs_scaled, d.metrics.max_abs_scaled) : d.metrics.max_abs_scaled;
      s.has_values = true;
    }
  }
  return out;
}

double row_error(const TensorDiff& d) {
  if (d.shape_cand) return HUGE_VAL;  // nothing measured: ranks with the worst
  if (d.routing) return d.routing->mismatch_share;
  if (d.kind == TensorKind::exact)
    return d.metrics.count ? static_cast<double>(d.metrics.n_diff) / static_cast<double>(d.metrics.count) : 0.0;
  if (d.metrics.new_nonfinite > 0) return HUGE_VAL;
  return d.metrics.rel_l2;
}

std::string error_text(const TensorDiff& d) {
  if (d.shape_cand) return "shape " + shape_str(*d.shape_cand) + " vs " + shape_str(d.shape);
  if (d.kind == TensorKind::routing || d.kind == TensorKind::exact) return num(100 * row_error(d), "{:.3g}") + "% differ";
  if (d.metrics.new_nonfinite > 0) return fmt::format("{} new NaN/Inf", d.metrics.new_nonfinite);
  return "rel_l2 " + num(row_error(d));
}

std::string expected_text(const TensorDiff& d) {
  return d.expected && (d.kind == TensorKind::values || d.kind == TensorKind::logits) ? num(d.expected->rel, "{:.2e}")
                                                                                       : "-";
}

// Five characters at most ("1.25", "12.3", "1e+04"): the terminal's ratio column.
std::string ratio_text(const TensorDiff& d) {
  if (std::isnan(d.tolerance_ratio)) return "-";
  return num(d.tolerance_ratio, d.tolerance_ratio < 999.5 ? "{:.3g}" : "{:.0e}");
}

std::string location_of(const CompareResult& r, const TensorDiff& d) {
  const PointedElement e = pointed_element(d);
  if (e.what == Pointed::none) return "";
  const std::string at = location_text(locate_pointed(r.locator.get(), d, e));
  return at.empty() ? fmt::format("element {}", e.flat) : at;
}

std::string where_text(const CompareResult& r, const TensorDiff& d) {
  const PointedElement e = pointed_element(d);
  if (e.what == Pointed::none) return "";
  std::string s = fmt::format("{} at {}", pointed_name(e.what), location_of(r, d));
  if (e.has_values) s += fmt::format(": reference {}, candidate {}", num(e.ref, "{:.6g}"), num(e.cand, "{:.6g}"));
  return s;
}

std::vector<std::size_t> worst_rows(const CompareResult& r, std::size_t n) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (row_error(r.rows[i]) > 0 || r.rows[i].verdict != Verdict::pass) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    const TensorDiff &x = r.rows[a], &y = r.rows[b];
    if (x.verdict != y.verdict) return x.verdict > y.verdict;
    return row_error(x) > row_error(y);
  });
  if (idx.size() > n) idx.resize(n);
  return idx;
}

Counts count_verdicts(const CompareResult& r) {
  Counts c;
  for (const auto& d : r.rows) {
    if (d.verdict == Verdict::pass) ++c.pass;
    else if (d.verdict == Verdict::warn) ++c.warn;
    else ++c.fail;
  }
  return c;
}

std::string verdict_cause(const CompareResult& r) {
  const Counts c = count_verdicts(r);
  const std::size_t one_side = r.only_ref.size() + r.only_cand.size();
  const auto tensors = [](std::size_t n) { return n == 1 ? "tensor" : "tensors"; };
  if (r.verdict == Verdict::fail)
    return fmt::format("{} {} FAIL", c.fail, tensors(static_cast<std::size_t>(c.fail)));
  if (r.verdict == Verdict::pass) return r.rows.empty() ? "no tensor compared" : "every tensor PASS";
  if (c.warn == 0) return fmt::format("{} {} on one side only", one_side, tensors(one_side));
  const std::string warn = fmt::format("{} {} WARN", c.warn, tensors(static_cast<std::size_t>(c.warn)));
  return one_side ? fmt::format("{}, {} on one side only", warn, one_side) : warn;
}

std::string verdict_line(const CompareResult& r) {
  const Counts c = count_verdicts(r);
  std::string s = fmt::format("{} ({}): {} FAIL, {} WARN, {} PASS of {} tensors", verdict_name(r.verdict),
                              verdict_cause(r), c.fail, c.warn, c.pass, r.rows.size());
  if (!r.only_ref.empty() || !r.only_cand.empty())
    s += fmt::format("; {} only in the reference, {} only in the candidate", r.only_ref.size(), r.only_cand.size());
  return s;
}

std::string padding_note(const CompareResult& r) {
  return r.padding_tokens ? fmt::format(" ({} padding tokens left out)", r.padding_tokens) : "";
}

std::string step_where(const ScheduleStep& st) {
  return st.decode ? fmt::format("decode, position {}", st.begin)
                   : fmt::format("prefill chunk, positions {}..{}", st.begin, st.end - 1);
}

std::string step_note(const CompareResult& r) {
  if (r.steps.empty()) return "";
  const auto f = first_failing_step(r);
  if (!f) return fmt::format("{} steps against the cache (no expected errors to hold each step to)", r.steps.size());
  const ScheduleStep& st = r.steps[f->step];
  const std::string step = fmt::format("schedule step {}/{} ({})", f->step + 1, r.steps.size(), step_where(st));
  const TensorDiff& d = r.rows[f->row];
  const std::string ratio = num(f->ratio, "{:.2f}");
  if (f->fails)
    return fmt::format("{} is the first where a failing tensor passes its bound: {} ({}x its expected error, FAIL above {})",
                       step, d.key(), ratio, num(d.thresholds.expected_fail));
  if (d.verdict == Verdict::fail)
    return fmt::format("no single step of a failing tensor passes its bound; the worst: {} at {} ({}x)", step, d.key(), ratio);
  return fmt::format("{} steps against the cache, no tensor failed; the worst step: {} at {} ({}x its expected error)",
                     r.steps.size(), step, d.key(), ratio);
}

std::string p_vs_d_note(const CompareResult& r) {
  if (!r.p_vs_d) return "";
  const PrefillVsDecode& p = *r.p_vs_d;
  const std::string head = fmt::format("{} steps against its own prefill: {} over {} predicting rows", p.steps, p.tensor, p.rows);
  if (p.differing == 0) return head + " bit-identical";
  return fmt::format("{}: {} elements differ, max {} of the largest; top-1 agreement {:.2f}%, KL max {}", head,
                     p.differing, num(p.max_rel), 100 * p.logits.top1_agree, num(p.logits.kl_max));
}

std::string divergence_note(const CompareResult& r) {
  if (!r.divergence || r.divergence->tokens() == 0) return "";
  return fmt::format("{} tokens followed their own selection (the first at {}): their later rows are judged apart "
                     "(diverged_rows, diverged_rel_l2 in report.csv), their flips at the selection",
                     r.divergence->tokens(), r.divergence->first_stage());
}

std::string group_name(const std::string& stage) {
  switch (stage_part(stage)) {
    case ModelPart::layers: return fmt::format("L{:02d}", stage_layer(stage));
    case ModelPart::head: return "head";
    case ModelPart::prologue: break;
  }
  return "prologue";
}

std::string num(double v, const char* spec) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format(fmt::runtime(spec), v);
}

std::string cosine_text(double c) {
  if (c == 1.0) return "1";
  // Closer to 1 than 7 decimals show: print the distance to 1 instead of "1.0000000".
  if (c > 1.0 - 5e-8 && c < 1.0) return "1-" + num(1.0 - c, "{:.1e}");
  return num(c, "{:.7f}");
}

namespace {
// &, <, >, " and ' as entities (`apostrophe`: the entity for '); `xml_chars`: drop the control
// characters XML 1.0 forbids even when escaped (all below 0x20 but newline and tab).
std::string escape_markup(const std::string& s, const char* apostrophe, bool xml_chars) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += apostrophe; break;
      default:
        if (!xml_chars || static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
    }
  }
  return out;
}
}  // namespace

std::string html_escape(const std::string& s) { return escape_markup(s, "&#39;", false); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string xml_escape(const std::string& s) { return escape_markup(s, "&apos;", true); }

std::string env_section(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string o = "<h2>Environment</h2>\n<table class=\"env\"><tbody>\n";
  for (const auto& [k, v] : env) {
    const bool lines = v.find('\n') != std::string::npos;
    o += fmt::format("<tr><td>{}</td><td>{}{}{}</td></tr>\n", html_escape(k), lines ? "<pre>" : "<code>", html_escape(v),
                     lines ? "</pre>" : "</code>");
  }
  return o + "</tbody></table>\n";
}

}  // namespace tdiff::report
