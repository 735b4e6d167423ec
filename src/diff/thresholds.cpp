#include "diff/thresholds.h"
#include "diff/token_verdicts.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace tdiff {

namespace {

constexpr double kOff = std::numeric_limits<double>::infinity();

// Each threshold with the values it can mean: a cosine lies in [-1, 1] (-1: the rule off), a
// share of elements in [0, 1], an error or divergence is >= 0; infinity turns a share or error
// rule off.
struct Field {
  const char* name;
  double Thresholds::*member;
  double lo = 0.0, hi = kOff;
  bool off_allowed = true;  // infinity accepted beyond hi
};
constexpr std::array kFields{
    Field{"cosine_fail", &Thresholds::cosine_fail, -1, 1, false},
    Field{"cosine_warn", &Thresholds::cosine_warn, -1, 1, false},
    Field{"max_abs_fail", &Thresholds::max_abs_fail},
    Field{"max_abs_warn", &Thresholds::max_abs_warn},
    Field{"max_abs_scaled", &Thresholds::max_abs_scaled, 0, 1, false},
    Field{"rel_l2_fail", &Thresholds::rel_l2_fail},
    Field{"rel_l2_warn", &Thresholds::rel_l2_warn},
    Field{"top1_fail", &Thresholds::top1_fail, 0, 1, false},
    Field{"kl_fail", &Thresholds::kl_fail},
    Field{"kl_warn", &Thresholds::kl_warn},
    Field{"mismatch_fail", &Thresholds::mismatch_fail, 0, 1},
    Field{"mismatch_warn", &Thresholds::mismatch_warn, 0, 1},
    Field{"floor_k", &Thresholds::floor_k},
    Field{"floor_atol", &Thresholds::floor_atol},
    Field{"tolerance", &Thresholds::tolerance, 0, 1, false},
    Field{"expected_warn", &Thresholds::expected_warn},
    Field{"expected_fail", &Thresholds::expected_fail},
    Field{"measured_warn", &Thresholds::measured_warn},
    Field{"measured_fail", &Thresholds::measured_fail},
    Field{"systematic", &Thresholds::systematic},
};

// Collects the reasons of the most severe level reached.
class Verdicts {
 public:
  void add(Verdict v, std::string why) {
    if (v < verdict_) return;
    if (v > verdict_) reasons_.clear();
    verdict_ = v;
    reasons_.push_back(std::move(why));
  }
  Judgement result() const {
    return {verdict_, fmt::format("{}", fmt::join(reasons_, "; ")), "", std::numeric_limits<double>::quiet_NaN()};
  }

 private:
  Verdict verdict_ = Verdict::pass;
  std::vector<std::string> reasons_;
};

// The max_abs rule at one threshold, with a reason naming the number that reached it.
void judge_max_abs(Verdicts& v, Verdict level, const TensorMetrics& m, const Thresholds& t, double threshold) {
  if (!(judged_max_abs(m, t) >= threshold)) return;
  const bool scaled = t.max_abs_scaled != 0.0;
  if (!scaled || m.max_abs_scaled == m.max_abs)
    v.add(level, fmt::format("max_abs {:.3g} >= {:g}", m.max_abs, threshold));
  else if (m.ref_at_max_abs_scaled <= m.max_abs_scale && m.max_abs_scale <= 1.0)  // absolute, not the largest |d|
    v.add(level, fmt::format("max_abs_scaled {:.3g} (|d| where |r| <= 1) >= {:g}", m.max_abs_scaled, threshold));
  else if (m.ref_at_max_abs_scaled <= m.max_abs_scale)  // relative to the tensor's scale
    v.add(level, fmt::format("max_abs_scaled {:.3g} (|d| {:.3g} against rms(r) {:.3g}) >= {:g}", m.max_abs_scaled,
                             m.max_abs_scaled * m.max_abs_scale, m.max_abs_scale, threshold));
  else
    v.add(level, fmt::format("max_abs_scaled {:.3g} (|d| {:.3g} at |r| {:.3g}) >= {:g}", m.max_abs_scaled,
                             m.max_abs_scaled * m.ref_at_max_abs_scaled, m.ref_at_max_abs_scaled, threshold));
}

Verdict level_of(double ratio, double warn, double fail) {
  return ratio > fail ? Verdict::fail : ratio > warn ? Verdict::warn : Verdict::pass;
}

// The tolerance rule: the error against what the candidate's formats explain and, with a
// measured floor, against what emu in the same formats carries: a level needs both.
void judge_expected(Verdicts& v, Judgement& j, const TensorMetrics& m, const ExpectedError& e, const MeasuredFloor* f,
                    const Thresholds& t) {
  const double ratio = expected_ratio(m, e);
  const Verdict a_priori = level_of(ratio, t.expected_warn, t.expected_fail);
  Verdict level = a_priori;
  j.decided_by = "a priori";
  if (f) {
    j.floor_ratio = measured_ratio(m, *f, e);
    const Verdict measured = level_of(j.floor_ratio, t.measured_warn, t.measured_fail);
    if (measured < a_priori) level = measured, j.decided_by = "measured floor";
  }
  if (level == Verdict::pass) return;
  const double limit = level == Verdict::fail ? t.expected_fail : t.expected_warn;
  const std::string floor =
      f ? fmt::format("; {:.3g}x the measured floor > {:g}x", j.floor_ratio,
                      level == Verdict::fail ? t.measured_fail : t.measured_warn)
        : "";
  const double elem = e.conditioned() ? e.elem_ratio : m.err_rel / e.elem;
  if (m.rel_l2 / e.rel >= elem)
    v.add(level, fmt::format("rel_l2 {:.3g} = {:.3g}x the {:.3g} expected ({}{}) > {:g}x{}", m.rel_l2, ratio, e.rel,
                             e.format, e.gain_l2 > 1.005 ? fmt::format(", conditioning {:.3g}x", e.gain_l2) : "",
                             limit, floor));
  else if (e.conditioned())
    v.add(level, fmt::format("err_rel {:.3g} at element {} = {:.3g}x the {:.3g} expected ({}{}) > {:g}x{}",
                             e.elem_ratio * e.elem, e.elem_at, ratio, e.elem, e.format,
                             e.gain_at > 1.005 ? fmt::format(", conditioning {:.3g}x there", e.gain_at) : "", limit,
                             floor));
  else
    v.add(level, fmt::format("err_rel {:.3g} at element {} = {:.3g}x the {:.3g} expected ({}) > {:g}x{}", m.err_rel,
                             m.argmax_err_rel, ratio, e.elem, e.format, limit, floor));
}

// What rounding cannot produce: the slices that stand out (at most two named; the reports
// list every family's strongest).
void judge_systematic(Verdicts& v, const SystematicFit& fit, const Thresholds& t) {
  if (t.systematic == 0.0) return;
  int named = 0;
  for (const auto& f : fit.findings)
    if (finding_fires(f, t.systematic, fit.unit_for(f)) && named++ < 2) v.add(Verdict::fail, finding_text(fit, f));
}

// A generation's tokens: a flip the formats do not explain and a loop the reference does not
// have FAIL (a WARN where no expected error bounds the flips); a token whose probability
// drifted WARNs; TIE-FLIPs are what the formats explain.
void judge_tokens(Verdicts& v, const TokenSteps& t) {
  const auto drift = t.counts[static_cast<std::size_t>(TokenVerdict::drift)];
  const auto wrong = t.counts[static_cast<std::size_t>(TokenVerdict::wrong)];
  if (wrong)
    v.add(t.bounded ? Verdict::fail : Verdict::warn,
          fmt::format("{} of {} generated tokens WRONG (another top-1 than the formats explain)", wrong, t.steps.size()));
  if (!t.loops.empty())
    v.add(Verdict::fail, fmt::format("row {} repeats a {}-token n-gram {} times to the end (the reference does not)",
                                     t.loops.front().row, t.loops.front().ngram, t.loops.front().repeats));
  if (drift)
    v.add(Verdict::warn, fmt::format("{} of {} generated tokens DRIFT (their log-probability beyond the formats' bound)",
                                     drift, t.steps.size()));
}

}  // namespace

double measured_ratio(const TensorMetrics& m, const MeasuredFloor& f, const ExpectedError& e) {
  const double a = m.rel_l2 / std::max(f.rel_l2, e.local), b = m.err_rel / std::max(f.err_rel, e.local);
  return std::max(std::isnan(a) ? 0.0 : a, std::isnan(b) ? 0.0 : b);
}

double expected_ratio(const TensorMetrics& m, const ExpectedError& e) {
  // Both parts of E are > 0 by construction (no format is exact); a zero stays harmless.
  const double a = e.rel > 0 ? m.rel_l2 / e.rel : (m.rel_l2 > 0 ? kOff : 0.0);
  const double b = e.conditioned() ? e.elem_ratio : e.elem > 0 ? m.err_rel / e.elem : (m.err_rel > 0 ? kOff : 0.0);
  return std::max(a, b);
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "PASS";
    case Verdict::warn: return "WARN";
    case Verdict::fail: return "FAIL";
  }
  return "?";
}

double judged_max_abs(const TensorMetrics& m, const Thresholds& t) {
  return t.max_abs_scaled != 0.0 ? m.max_abs_scaled : m.max_abs;
}

Thresholds::Thresholds() : rel_l2_fail(kOff), rel_l2_warn(kOff), kl_fail(kOff), kl_warn(kOff) {}

void set_threshold(Thresholds& t, std::string_view key, double value) {
  for (const auto& f : kFields)
    if (key == f.name) {
      if (std::isnan(value)) input_error("threshold {} is NaN", key);
      if (f.member == &Thresholds::max_abs_scaled && value != 0.0 && value != 1.0)
        input_error("threshold max_abs_scaled is a switch: 1 (judge |d| / max(1, rms(r), |r|)) or 0 (plain |d|), not {:g}",
                    value);
      if (f.member == &Thresholds::tolerance && value != 0.0 && value != 1.0)
        input_error("threshold tolerance is a switch: 1 (judge against the expected error) or 0 (max_abs rules), not {:g}",
                    value);
      if (value < f.lo || (value > f.hi && !(f.off_allowed && value == kOff)))
        input_error("threshold {} = {:g} is outside [{:g}, {:g}]{}", key, value, f.lo, f.hi,
                    f.off_allowed && f.hi < kOff ? " (inf: the rule off)" : "");
      t.*f.member = value;
      return;
    }
  input_error("unknown threshold '{}' (known: {})", key, fmt::join(threshold_keys(), ", "));
}

std::vector<std::string> threshold_keys() {
  std::vector<std::string> keys;
  for (const auto& f : kFields) keys.emplace_back(f.name);
  return keys;
}

bool stage_matches(const std::string& pattern, const std::string& stage, const std::string& tensor) {
  if (fnmatch(pattern.c_str(), stage.c_str(), 0) == 0) return true;
  return !tensor.empty() && fnmatch(pattern.c_str(), (stage + "/" + tensor).c_str(), 0) == 0;
}

Thresholds ThresholdPolicy::for_tensor(const std::string& stage, const std::string& tensor) const {
  Thresholds t = defaults;
  for (const auto& rule : rules)
    for (const auto& pat : rule.patterns)
      if (stage_matches(pat, stage, tensor)) {
        for (const auto& [key, value] : rule.values) set_threshold(t, key, value);
        break;
      }
  return t;
}

void ThresholdPolicy::check_patterns(const std::vector<std::string>& stages) const {
  for (const auto& rule : rules)
    for (const auto& pat : rule.patterns) {
      bool hit = false;
      for (const auto& s : stages) {
        // The candidates may be "stage" or "stage/tensor" keys: match either form.
        const auto slash = s.rfind('/');
        hit = slash == std::string::npos ? stage_matches(pat, s)
                                         : stage_matches(pat, s.substr(0, slash), s.substr(slash + 1));
        if (hit) break;
      }
      if (!hit) input_error("{}: stage pattern '{}' matches no stage", rule.origin, pat);
    }
}

// A selection tensor: its tokens with another choice (see JudgeInput::routing).
static void judge_routing(Verdicts& v, const RoutingMetrics& routing, const Thresholds& t) {
  // Without replay every untied flip counts; with replay, or judged on the candidate's own
  // path (RoutingMetrics::own_path), only the flips its own scores do not explain (top-k
  // faults), the others are a WARN (a note under the tolerance rule).
  const RoutingMetrics& r = routing;
  const bool own_scores = r.replayed || r.own_path;
  const std::int64_t differ = r.tokens - r.equal_tokens - r.tie_tokens;
  const std::int64_t unexplained = differ - r.explained_tokens;
  const std::string right =
      r.explained_tokens == differ ? "all" : fmt::format("{} of {}", r.explained_tokens, differ);
  const std::string near = r.within_margin_tokens
                               ? fmt::format("; {} within the scores' expected error of the reference's margin",
                                             r.within_margin_tokens)
                               : "";
  if (r.judged_share() <= t.mismatch_fail) {
    // Under the tolerance rule, replayed flips that the candidate's own scores explain are
    // what its formats explain (the scores are judged at their own stage): a note, not a WARN.
    const bool expected = t.tolerance != 0.0 && own_scores && unexplained == 0;
    if (r.mismatch_share > t.mismatch_warn)
      v.add(expected ? Verdict::pass : Verdict::warn,
            fmt::format("{:.3g}% tokens with other selections ({} right on the candidate's own scores{}{})",
                        100 * r.mismatch_share, right, r.replayed ? ", replayed" : r.own_path ? ", on its own path" : "",
                        near));
  } else if (own_scores)
    v.add(Verdict::fail, fmt::format("{:.3g}% tokens chose ids their own scores rank lower ({} of {} differing{})",
                                     100 * r.unexplained_share, unexplained, differ, near));
  else
    v.add(Verdict::fail, fmt::format("{:.3g}% tokens with other selections ({} right on the candidate's own scores{})",
                                     100 * r.mismatch_share, right, near));
}

Judgement judge_tensor(const JudgeInput& in, const Thresholds& t) {
  Verdicts v;
  Judgement j;
  const TensorMetrics& m = *in.metrics;
  if (in.exact) {
    if (in.routing) {
      judge_routing(v, *in.routing, t);
      return v.result();
    }
    const double share = m.count ? static_cast<double>(m.n_diff) / static_cast<double>(m.count) : 0.0;
    if (share > t.mismatch_fail) v.add(Verdict::fail, fmt::format("{:.3g}% elements differ", 100 * share));
    else if (share > t.mismatch_warn) v.add(Verdict::warn, fmt::format("{:.3g}% elements differ", 100 * share));
    return v.result();
  }
  if (m.new_nonfinite > 0) v.add(Verdict::fail, fmt::format("{} NaN/Inf not in the reference", m.new_nonfinite));
  if (m.cosine < t.cosine_fail) v.add(Verdict::fail, fmt::format("cosine {:.6g} < {:g}", m.cosine, t.cosine_fail));
  const bool tolerance = t.tolerance != 0.0 && in.expected;
  if (tolerance) judge_expected(v, j, m, *in.expected, in.measured, t);
  else judge_max_abs(v, Verdict::fail, m, t, t.max_abs_fail);
  if (m.rel_l2 >= t.rel_l2_fail) v.add(Verdict::fail, fmt::format("rel_l2 {:.3g} >= {:g}", m.rel_l2, t.rel_l2_fail));
  if (in.systematic) judge_systematic(v, *in.systematic, t);
  if (in.logits) {
    const LogitsMetrics& l = *in.logits;
    if (l.top1_agree < t.top1_fail) v.add(Verdict::fail, fmt::format("top-1 agreement {:.4g} < {:g}", l.top1_agree, t.top1_fail));
    if (l.kl_max >= t.kl_fail) v.add(Verdict::fail, fmt::format("max KL {:.3g} >= {:g}", l.kl_max, t.kl_fail));
    if (l.kl_max >= t.kl_warn) v.add(Verdict::warn, fmt::format("max KL {:.3g} >= {:g}", l.kl_max, t.kl_warn));
  }
  if (in.tokens) judge_tokens(v, *in.tokens);
  if (in.floor) {
    const double budget = t.floor_k * in.floor->rmse + t.floor_atol;
    if (m.rmse > budget)
      v.add(Verdict::fail, fmt::format("rmse {:.3g} > {:g} x floor {:.3g}", m.rmse, t.floor_k, in.floor->rmse));
  }
  if (m.cosine < t.cosine_warn) v.add(Verdict::warn, fmt::format("cosine {:.6g} < {:g}", m.cosine, t.cosine_warn));
  if (!tolerance) judge_max_abs(v, Verdict::warn, m, t, t.max_abs_warn);
  if (m.rel_l2 >= t.rel_l2_warn) v.add(Verdict::warn, fmt::format("rel_l2 {:.3g} >= {:g}", m.rel_l2, t.rel_l2_warn));
  const Judgement out = v.result();
  j.verdict = out.verdict;
  j.reason = out.reason;
  return j;
}

}  // namespace tdiff
