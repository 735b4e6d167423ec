#include "app/history_command.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "history/history_db.h"
#include "report/history_html.h"

namespace tdiff::app {

namespace fs = std::filesystem;

namespace {

// The runs of the target grouped by case, oldest first.
std::map<std::string, std::vector<history::RunEntry>> runs_by_case(const HistoryTarget& t, const std::string& label,
                                                                   const std::string& kind) {
  history::HistoryDb db(t.db, false);
  std::vector<history::RunEntry> runs = db.runs({"", label, kind, 0, true});
  // A case given: its series, which for a golden set's case spans the set's versions.
  std::set<std::string> wanted;
  for (const auto& e : runs)
    if (t.case_path.empty() || e.case_path == t.case_path) wanted.insert(history::series_key(e));
  std::map<std::string, std::vector<history::RunEntry>> out;
  for (auto& e : runs)
    if (wanted.count(history::series_key(e))) out[history::series_key(e)].push_back(std::move(e));
  if (out.empty())
    input_error("{}: no {}runs{}{} recorded", t.db, kind.empty() ? "" : kind + " ",
                t.case_path.empty() ? "" : " of " + t.case_path, label.empty() ? "" : " labelled \"" + label + "\"");
  return out;
}

std::string fig(const history::Build& b, const char* name, const char* spec) {
  const auto it = b.figures.find(name);
  return it == b.figures.end() ? "-" : fmt::format(fmt::runtime(spec), it->second.value);
}

// The steps of the whole-model figures, then the per-stage-class ones with the largest
// relative change (the page draws them all).
void print_steps(const report::HistoryCase& hc) {
  struct Shown {
    std::string figure;
    history::Step step;
    double rel;
  };
  std::vector<Shown> model, classes;
  for (const auto& [figure, steps] : hc.steps)
    for (const auto& s : steps) {
      const double rel = s.before != 0 ? (s.after - s.before) / std::fabs(s.before) : INFINITY;
      (figure.find(':') == std::string::npos ? model : classes).push_back({figure, s, rel});
    }
  if (model.empty() && classes.empty()) return fmt::print("  steps: none beyond the noise\n");
  fmt::print("  steps (a change of level beyond the noise, at the build that made it):\n");
  std::stable_sort(classes.begin(), classes.end(), [](const Shown& a, const Shown& b) { return std::fabs(a.rel) > std::fabs(b.rel); });
  constexpr std::size_t kClassesShown = 8;
  for (std::size_t i = 0; i < model.size() + std::min(classes.size(), kClassesShown); ++i) {
    const Shown& x = i < model.size() ? model[i] : classes[i - model.size()];
    fmt::print("    {:<28} {:.4g} -> {:.4g} ({}) at {}\n", x.figure, x.step.before, x.step.after,
               std::isfinite(x.rel) ? fmt::format("{:+.1f}%", 100 * x.rel) : "from 0", hc.builds[x.step.at].label);
  }
  if (classes.size() > kClassesShown)
    fmt::print("    ... and {} more steps of stage classes (--html draws every series)\n", classes.size() - kClassesShown);
}

void print_builds(const std::string& case_path, const report::HistoryCase& hc, const std::vector<history::RunEntry>& runs,
                  bool list_runs) {
  fmt::print("\ncase {}: {} runs, {} builds\n", case_path, runs.size(), hc.builds.size());  // a path, or set/name
  fmt::print("  {:<32} {:>4} {:<7} {:>10} {:>9} {:>10} {:>10} {:>7} {:>8}  {}\n", "build (label)", "runs", "verdict",
             "forward s", "spread", "tokens/s", "logits KL", "top-1", "worst", "verified");
  for (const auto& b : hc.builds) {
    std::string verified = "-";
    for (const auto* e : b.runs)
      if (e->speed.repeats > 0) verified = e->speed.verified;
    const auto t = b.figures.find("forward_s");
    const std::string spread = t == b.figures.end() || std::isnan(t->second.spread) ? "-" : fmt::format("{:.2g}", t->second.spread);
    fmt::print("  {:<32} {:>4} {:<7} {:>10} {:>9} {:>10} {:>10} {:>7} {:>8}  {}\n", b.label, b.runs.size(),
               b.latest_verdict, fig(b, "forward_s", "{:.4g}"), spread, fig(b, "tokens_per_s", "{:.4g}"),
               fig(b, "logits_kl", "{:.3g}"), fig(b, "logits_top1", "{:.4f}"), fig(b, "worst_ratio", "{:.3g}"), verified);
  }
  print_steps(hc);
  if (!list_runs) return;
  for (const auto& e : runs)
    fmt::print("    {}  {}  {:<11} {:<5} {}  {}\n", e.id, e.date_utc, e.kind, e.verdict, e.label,
               e.summary.empty() ? e.first_divergence : e.summary);
}

report::HistoryCase history_case(const std::string& case_path, const std::vector<history::RunEntry>& runs, double noise) {
  report::HistoryCase hc;
  hc.name = fs::path(case_path).filename().string();
  hc.builds = history::builds_of(runs);
  // Seconds per stage class come from one profiled forward a run: at least as noisy, relatively,
  // as the whole forward's repeats.
  const auto forward = std::find_if(hc.builds.begin(), hc.builds.end(), [](const history::Build& b) {
    return b.figures.count("forward_s");
  });
  const double forward_noise = forward == hc.builds.end() ? 0
                               : history::series_noise(hc.builds, "forward_s", noise) / forward->figures.at("forward_s").value;
  for (const auto& f : history::figure_names(hc.builds)) {
    std::vector<double> y;
    for (const auto& b : hc.builds) {
      const auto it = b.figures.find(f);
      y.push_back(it == b.figures.end() ? NAN : it->second.value);
    }
    const double n = history::series_noise(hc.builds, f, f.rfind("seconds:", 0) == 0 ? std::max(noise, forward_noise) : noise);
    hc.steps.emplace_back(f, history::detect_steps(y, n));
    hc.noise.push_back(n);
  }
  return hc;
}

// Failures first, then flags, then notes; at most 12 of each, the rest counted.
void print_findings(const std::vector<history::GateFinding>& findings) {
  constexpr std::size_t kShown = 12;
  for (const auto level : {history::GateLevel::fail, history::GateLevel::flag, history::GateLevel::note}) {
    std::size_t n = 0;
    for (const auto& f : findings)
      if (f.level == level && n++ < kShown)
        fmt::print("  {:<5} {}: {}\n", level == history::GateLevel::fail ? "FAIL" : level == history::GateLevel::flag ? "FLAG" : "note",
                   f.what, f.detail);
    if (n > kShown) fmt::print("  ... and {} more {}\n", n - kShown, level == history::GateLevel::fail ? "failures" : level == history::GateLevel::flag ? "flags" : "notes");
  }
}

}  // namespace

HistoryTarget resolve_history_target(const std::string& target, const std::string& given) {
  std::error_code ec;
  if (fs::is_regular_file(target, ec))
    return {history::history_path_for(target, given), fs::absolute(target).lexically_normal().string()};
  if (!fs::is_directory(target, ec)) input_error("{}: no such case file or folder", target);
  if (!given.empty()) return {given, ""};
  if (const char* env = std::getenv("TDIFF_HISTORY"); env && *env) return {env, ""};
  // A folder of cases, or a golden set, whose cache keeps the set's history in its root.
  for (const fs::path& p : {fs::path(target) / history::kHistoryFile, fs::path(target) / "cache" / history::kHistoryFile})
    if (fs::exists(p, ec)) return {p.string(), ""};
  input_error("{}: no run history in it (looked for {} there and, for a golden set, in its cache/)", target,
              history::kHistoryFile);
}

int run_history(const HistoryCmd& c) {
  const HistoryTarget t = resolve_history_target(c.target, c.history);
  const auto cases = runs_by_case(t, c.label, c.kind);
  fmt::print("history {}\n", t.db);
  std::vector<report::HistoryCase> shown;
  for (const auto& [path, runs] : cases) {
    shown.push_back(history_case(path, runs, c.noise));
    print_builds(path, shown.back(), runs, c.runs);
  }
  if (!c.html.empty()) {
    AtomicFile out(c.html);
    out.write(report::render_history_html("tdiff history: " + c.target, shown));
    out.commit();
    fmt::print("\nhtml        {}\n", c.html);
  }
  return 0;
}

int run_gate(GateCmd c) {
  const HistoryTarget t = resolve_history_target(c.target, c.history);
  auto cases = runs_by_case(t, "", "");
  if (c.gate.candidate.empty()) {  // the newest run's label
    std::string newest_date;
    for (const auto& [path, runs] : cases)
      for (const auto& e : runs)
        if ((e.kind == "run" || e.kind == "ci") && e.date_utc >= newest_date) newest_date = e.date_utc, c.gate.candidate = e.label;
  }
  std::set<std::string> labels;
  for (const auto& [path, runs] : cases)
    for (const auto& e : runs)
      if (e.kind == "run" || e.kind == "ci") labels.insert(e.label);
  for (const std::string* l : {&c.gate.baseline, &c.gate.candidate})
    if (!labels.count(*l))
      input_error("{}: no run or ci record labelled \"{}\" (labels there: {})", t.db, *l, fmt::join(labels, ", "));
  if (c.gate.candidate == c.gate.baseline)
    input_error("--baseline \"{}\" is also the candidate (the newest run's label): give --candidate LABEL", c.gate.baseline);
  fmt::print("gate {} against baseline {} (error tolerance {:g}, speed tolerance {:g}{})\n", c.gate.candidate,
             c.gate.baseline, c.gate.error_tolerance, c.gate.speed_tolerance, c.gate.speed ? "" : ", speed not judged");
  int failed = 0;
  for (const auto& [path, runs] : cases) {
    const history::CaseGate g = history::gate_case(fs::path(path).filename().string(), runs, c.gate);
    failed += !g.pass();
    fmt::print("\n{} {} ({} baseline runs, {} candidate runs)\n", g.pass() ? "PASS" : "FAIL", g.case_name, g.baseline_runs,
               g.candidate_runs);
    print_findings(g.findings);
  }
  fmt::print("\ngate: {} ({} of {} cases fail)\n", failed ? "FAIL" : "PASS", failed, cases.size());
  return failed ? 1 : 0;
}

}  // namespace tdiff::app
