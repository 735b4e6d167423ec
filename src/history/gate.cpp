#include "history/gate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "history/series.h"

namespace tdiff::history {

namespace {

struct Figure {  // one figure over one label's runs
  std::vector<double> v;
  double median() const { return history::median(v); }
  double spread() const { return v.size() < 2 ? 0 : *std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end()); }
};

struct Side {
  std::vector<const RunEntry*> runs;  // oldest first
  std::map<std::string, Figure> errors;  // per tensor key
  Figure kl, top1, speed;
  std::vector<std::string> unverified;
};

Side side_of(const std::vector<RunEntry>& runs, const std::string& label) {
  Side s;
  for (const RunEntry& e : runs) {
    if (e.label != label || (e.kind != "run" && e.kind != "ci")) continue;
    s.runs.push_back(&e);
    for (const StageRecord& r : e.stages)
      if (std::isfinite(r.error)) s.errors[r.key].v.push_back(r.error);
    if (std::isfinite(e.logits_kl)) s.kl.v.push_back(e.logits_kl);
    if (std::isfinite(e.logits_top1)) s.top1.v.push_back(1 - e.logits_top1);  // judged as an error
    if (e.speed.repeats > 0 && std::isfinite(e.speed.forward_s)) {
      s.speed.v.push_back(e.speed.forward_s);
      if (e.speed.verified.rfind("no", 0) == 0 || e.speed.verified.empty()) s.unverified.push_back(e.id + ": " + e.speed.verified);
    }
  }
  return s;
}

// An error figure (lower is better): a finding when it rose beyond the noise, or fell beyond it
// (an unexplained improvement).
void judge_figure(const std::string& name, const Figure& b, const Figure& c, double tolerance, const GateOptions& o,
                  std::vector<GateFinding>& out) {
  if (b.v.empty() || c.v.empty()) return;
  const double mb = b.median(), mc = c.median();
  const double noise = std::max({b.spread(), c.spread(), tolerance * std::fabs(mb)});
  const double worse = mc - mb;
  const std::string numbers = fmt::format("{:.4g} -> {:.4g} (noise {:.2g}; {} / {} runs)", mb, mc, noise, b.v.size(), c.v.size());
  if (worse > noise) out.push_back({GateLevel::fail, name + " worse", numbers});
  else if (-worse > noise)
    out.push_back({o.accept_improvements ? GateLevel::note : GateLevel::flag, name + " better", numbers});
}

void judge_speed(const Side& b, const Side& c, const GateOptions& o, std::vector<GateFinding>& out) {
  if (b.speed.v.empty() || c.speed.v.empty()) {
    out.push_back({GateLevel::fail, "speed not measured",
                   fmt::format("{} has no timed run (tdiff run --timed N --label {})", b.speed.v.empty() ? o.baseline : o.candidate,
                               b.speed.v.empty() ? o.baseline : o.candidate)});
    return;
  }
  for (const Side* s : {&b, &c})
    for (const auto& u : s->unverified) out.push_back({GateLevel::fail, "speed not verified", u});
  const double tb = b.speed.median(), tc = c.speed.median();
  const double noise = std::max({b.speed.spread(), c.speed.spread(), o.speed_tolerance * tb});
  const std::string numbers = fmt::format("forward {:.4g} s -> {:.4g} s ({:+.1f}%; noise {:.2g} s; {} / {} runs)", tb, tc,
                                          100 * (tc - tb) / tb, noise, b.speed.v.size(), c.speed.v.size());
  out.push_back({tc - tb > noise ? GateLevel::fail : GateLevel::note, tc - tb > noise ? "slower" : "speed", numbers});
}

}  // namespace

bool CaseGate::pass() const {
  return std::none_of(findings.begin(), findings.end(), [](const GateFinding& f) { return f.level != GateLevel::note; });
}

CaseGate gate_case(const std::string& case_name, const std::vector<RunEntry>& runs, const GateOptions& o) {
  CaseGate g;
  g.case_name = case_name;
  const Side b = side_of(runs, o.baseline), c = side_of(runs, o.candidate);
  g.baseline_runs = static_cast<int>(b.runs.size());
  g.candidate_runs = static_cast<int>(c.runs.size());
  if (b.runs.empty() || c.runs.empty()) {
    g.findings.push_back({GateLevel::fail, "no runs",
                          fmt::format("no run or ci record labelled \"{}\"", b.runs.empty() ? o.baseline : o.candidate)});
    return g;
  }
  std::map<std::string, std::string> was;  // the baseline's newest verdicts
  for (const StageRecord& r : b.runs.back()->stages) was[r.key] = r.verdict;
  for (const StageRecord& r : c.runs.back()->stages)
    if (r.verdict == "FAIL" && was[r.key] != "FAIL")
      g.findings.push_back({GateLevel::fail, "new FAIL", fmt::format("{} (baseline {})", r.key, was[r.key].empty() ? "not compared" : was[r.key])});
  judge_figure("logits KL", b.kl, c.kl, o.error_tolerance, o, g.findings);
  judge_figure("logits top-1 disagreement", b.top1, c.top1, o.error_tolerance, o, g.findings);
  if (o.speed) judge_speed(b, c, o, g.findings);
  for (const auto& [key, fb] : b.errors)
    if (const auto it = c.errors.find(key); it != c.errors.end())
      judge_figure("error of " + key, fb, it->second, o.error_tolerance, o, g.findings);
  return g;
}

}  // namespace tdiff::history
