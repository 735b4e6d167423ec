// A bisection on the terminal, in CSV and in JSON.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/version.h"
#include "diff/step_errors.h"
#include "report/bisect_report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::num;

using report::csv_field;

std::string full(double v) { return num(v, "{}"); }

nlohmann::json number(double v) {
  if (std::isfinite(v)) return v;
  return num(v);
}

bool exact(const TensorDiff& d) { return d.kind == TensorKind::exact || d.kind == TensorKind::routing; }

std::string stage_list(const std::vector<Culprit>& c) {
  std::vector<std::string> names;
  for (const auto& x : c) names.push_back(x.stage);
  return fmt::format("{}", fmt::join(names, ", "));
}

nlohmann::json watched_json(const WatchedError& w) {
  nlohmann::json j = {{"tensor", w.diff.key()},        {"verdict", verdict_name(w.diff.verdict)},
                      {"reason", w.diff.reason},        {"error", number(w.error())},
                      {"rmse", number(w.diff.metrics.rmse)}, {"cosine", number(w.diff.metrics.cosine)},
                      {"max_abs", number(w.diff.metrics.max_abs)},
                      {"max_abs_scaled", number(w.diff.metrics.max_abs_scaled)},
                      {"rel_l2", number(w.diff.metrics.rel_l2)},
                     };
  if (w.has_floor) {
    j["identical_to_floor"] = w.identical;
    j["companion_error"] = number(w.companion_error);
    j["floor_error"] = number(w.floor_error);
    j["vs_floor"] = number(w.vs_floor());
  }
  if (w.diff.logits) {
    j["top1_agree"] = number(w.diff.logits->top1_agree);
    j["kl_mean"] = number(w.diff.logits->kl_mean);
    j["kl_max"] = number(w.diff.logits->kl_max);
  }
  return j;
}

nlohmann::json ranking_json(const IsolationResult& iso) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : iso.ranked) {
    nlohmann::json e = {{"stage", s.stage}, {"class", s.cls}, {"stage_index", s.index + 1}, {"tensor", s.worst.tensor},
                        {"verdict", verdict_name(s.worst.verdict)}, {"reason", s.worst.reason},
                        {"rmse", number(s.worst.metrics.rmse)}, {"rel_l2", number(s.worst.metrics.rel_l2)},
                        {"cosine", number(s.worst.metrics.cosine)}, {"score", number(s.score)}};
    if (s.floor_error) e["floor_error"] = number(*s.floor_error);
    rows.push_back(e);
  }
  return rows;
}

// A ratio to the floor: "1.71x", or what an infinite one means.
std::string times(double ratio) { return std::isinf(ratio) ? "an error where the floor has none" : num(ratio, "{:.3g}") + "x"; }

std::string fit(const std::string& s, std::size_t w) { return s.size() <= w ? s : s.substr(0, w - 1) + "~"; }

}  // namespace

std::string grouping_name(Grouping g) { return g == Grouping::stage_class ? "operator class" : "operator kind"; }

std::string BisectReport::outcome() const {
  if (isolation) {
    int fails = 0;
    for (const auto& s : isolation->ranked) fails += s.worst.verdict == Verdict::fail;
    if (!fails) return "nothing crosses the threshold: every stage's local error passes";
    return fmt::format("{} stage{} fail{} on the reference's own inputs; worst {}", fails, fails == 1 ? "" : "s",
                       fails == 1 ? "s" : "", isolation->ranked.front().stage);
  }
  if (!search) return "no search";
  if (!search->full_fails && leads && !leads->ranked.empty()) {
    const IsolatedStage& top = leads->ranked.front();
    return fmt::format("inconclusive: nothing crosses the threshold (the all-candidate run passes on {}); the largest "
                       "local {} is {} ({})",
                       watch.key(), floor.empty() ? "error" : "deviation from the floor", top.worst.key(),
                       floor.empty() ? "rel_l2 " + num(top.score, "{:.3g}") : times(top.score));
  }
  if (!search->full_fails) return "nothing crosses the threshold: the all-candidate run passes on " + watch.key();
  const auto& c = search->culprits;
  std::string s = fmt::format("first culprit {} ({}); culprit set {{{}}}", c.front().stage, c.front().cls, stage_list(c));
  if (search->passes_after) s += fmt::format(": with {} on {} the candidate passes", c.size() == 1 ? "it" : "them", rest);
  else if (search->capped) s += fmt::format(": stopped after {} culprits, the candidate still fails", c.size());
  return s;
}

int BisectReport::exit_code() const {
  if (isolation) {
    for (const auto& s : isolation->ranked)
      if (s.worst.verdict == Verdict::fail) return 1;
    return 0;
  }
  return search && !search->culprits.empty() ? 1 : 0;
}

std::vector<std::string> divergence_story(const BisectReport& r) {
  if (!r.search || r.run_first_fail.empty()) return {};
  const std::string f = r.run_first_fail, run_stage = f.substr(0, f.find('/'));
  const std::string watch = r.watch.key();
  if (r.search->culprits.empty())
    return {fmt::format("the all-candidate run has FAIL rows (the first: {}), but no split moves {} beyond the gate: a "
                        "tensor can cross its own thresholds while later stages damp its error (norms, softmax, "
                        "routing that does not flip) or while the floor run has the same error",
                        f, watch)};
  const Culprit& c = r.search->culprits.front();
  if (c.stage == run_stage) return {};
  std::vector<std::string> lines = {
      fmt::format("`tdiff run` calls {} the first divergence: the first tensor, in model order, whose own error crosses "
                  "its thresholds; bisect names {}: the first stage whose candidate output makes {} fail the gate.",
                  f, c.stage, watch)};
  if (r.run_first_fail_index < c.index)
    lines.push_back(fmt::format("{} comes first, yet with every stage before {} on the candidate ({} included) {} "
                                "passes: its error stays local (damped by later norms, softmax or routing, or shared "
                                "by the floor).",
                                run_stage, c.stage, run_stage, watch));
  else
    lines.push_back(fmt::format("{} comes first: its own output is within its thresholds, yet its error grows "
                                "downstream until {} fails.",
                                c.stage, watch));
  return lines;
}

std::string watch_rule(const BisectReport& r) {
  const Thresholds& t = r.watch_thresholds;
  std::string atol = t.floor_atol > 0 ? fmt::format(" + {:g}", t.floor_atol) : "";
  if (r.floor.empty())
    return fmt::format("FAIL when {} crosses its thresholds (cosine < {:g}, {} >= {:g}, ...) or holds a new NaN/Inf",
                       r.watch.key(), t.cosine_fail, t.max_abs_scaled != 0 ? "max_abs_scaled" : "max_abs",
                       t.max_abs_fail);
  return fmt::format(
      "FAIL when {} has {} > {:g} x the floor's{} (floor: {} on the same split, or the all-floor run where that is "
      "smaller; equal bits to the floor pass), crosses a threshold that floor_k x the floor's error would not, or holds a new NaN/Inf",
      r.watch.key(), r.trace.empty() || !exact(r.trace.front().watched.diff) ? "rmse" : "a mismatch share", t.floor_k,
      atol, r.floor);
}

namespace {

std::string paint(Verdict v, bool color) {
  const std::string n = verdict_name(v);
  if (!color) return n;
  return (v == Verdict::fail ? "\033[1;31m" : v == Verdict::warn ? "\033[33m" : "\033[32m") + n + "\033[0m";
}

// The ranked isolation table: the first `top` rows, and every FAIL after them unless `only_top`.
void print_ranking(std::FILE* out, const IsolationResult& iso, bool floor, std::size_t top, bool color,
                   bool only_top = false) {
  fmt::print(out, "{:>4}  {:<34} {:>9} {:>9} {:>10}  {}\n", "rank", "tensor", "cosine", "error", floor ? "ratio" : "rel_l2",
             "verdict");
  std::size_t shown = 0;
  for (const auto& s : iso.ranked) {
    if (shown >= top && (only_top || s.worst.verdict != Verdict::fail)) break;
    ++shown;
    const TensorDiff& d = s.worst;
    fmt::print(out, "{:>4}  {:<34} {:>9} {:>9} {:>10}  {}\n", shown, fit(d.key(), 34),
               exact(d) ? "exact" : report::cosine_text(d.metrics.cosine), exact(d) ? "" : num(d.metrics.rmse, "{:.2e}"),
               num(s.score, "{:.3g}"), paint(d.verdict, color));
    if (d.verdict == Verdict::fail) fmt::print(out, "{:6}{}\n", "", d.reason);
  }
}

void print_attribution(std::FILE* out, const BisectReport& r, bool color) {
  const AttributionResult& a = *r.attribution;
  fmt::print(out, "\nattribution by {}: each alone on the candidate, the rest on {} ({} {})\n",
             grouping_name(a.by), r.rest, r.watch.key(), exact(r.trace.front().watched.diff) ? "mismatch share" : "rmse");
  fmt::print(out, "{:<24} {:>6} {:>10} {:>7} {:>9} {:>9}  {}\n", "class", "stages", "error", "share", "alone/all",
             r.floor.empty() ? "" : "vs floor", "verdict");
  for (const auto& c : a.rows)
    fmt::print(out, "{:<24} {:>6} {:>10} {:>6.1f}% {:>9} {:>9}  {}\n", fit(c.group, 24), c.stages,
               num(c.watched.error(), "{:.2e}"), 100 * c.share, num(c.vs_all, "{:.3g}"),
               r.floor.empty() ? "" : num(c.watched.vs_floor(), "{:.3g}"), paint(c.watched.diff.verdict, color));
  fmt::print(out, "all classes together: error {}; sqrt(sum of the classes' squared errors) is {} x that{}\n",
             num(a.all_error, "{:.2e}"), num(a.quadrature, "{:.3g}"),
             std::abs(a.quadrature - 1) > 0.25 ? " (the classes interact: near-tie routing flips, cancellation)" : "");
}

void print_totals(std::FILE* out, const BisectReport& r) {
  const BisectTotals& t = r.totals;
  std::string runs = fmt::format("{} mixed run{}", t.mixed_runs, t.mixed_runs == 1 ? "" : "s");
  if (t.floor_runs)
    runs += fmt::format(" + {} floor run{} ({})", t.floor_runs, t.floor_runs == 1 ? "" : "s",
                        r.rest == "the floor" ? "the all-floor run, every split's companion" : "the floor on the same splits");
  if (t.isolated_runs) runs += fmt::format(", {} isolated stage runs", t.isolated_runs);
  fmt::print(out, "runs      {}; stages computed {}, read from the case {}, from earlier runs {}; {:.2f} s\n", runs,
             t.computed, t.reused, t.cached, t.seconds);
}

}  // namespace

void print_bisect_head(std::FILE* out, const BisectReport& r) {
  fmt::print(out, "bisect    {}\n", r.candidate);
  fmt::print(out, "watch     {} (stage {} of the model: {} stages can matter)\n", r.watch.key(), r.watch.index + 1, r.stages);
  fmt::print(out, "rule      {}\n", watch_rule(r));
  print_bisect_notes(out, r, 0);
  if (r.trace.empty()) return;
  const bool floor = !r.floor.empty();
  fmt::print(out, "\n{:>4}  {:<6}  {:<52} {:>9} {:>9} {:>8}  {}\n", "step", "phase", "stages on the candidate", "error",
             floor ? "floor" : "", floor ? "ratio" : "", "verdict");
}

void print_bisect_notes(std::FILE* out, const BisectReport& r, std::size_t from) {
  for (std::size_t i = from; i < r.notes.size(); ++i) fmt::print(out, "note      {}\n", r.notes[i]);
}

void print_trace_row(std::FILE* out, const BisectReport& r, const Probe& p, bool color) {
  const bool floor = !r.floor.empty();
  const WatchedError& w = p.watched;
  fmt::print(out, "{:>4}  {:<6}  {:<52} {:>9} {:>9} {:>8}  {}\n", p.step, p.phase, fit(p.split, 52),
             exact(w.diff) ? fmt::format("{:.2g}%", 100 * w.error()) : num(w.error(), "{:.2e}"),
             !floor ? "" : exact(w.diff) ? fmt::format("{:.2g}%", 100 * w.budget_base()) : num(w.budget_base(), "{:.2e}"),
             floor ? num(w.vs_floor(), "{:.4g}") : "", paint(p.verdict(), color));
  if (p.verdict() == Verdict::fail && !w.diff.reason.empty()) fmt::print(out, "{:14}{}\n", "", w.diff.reason);
}

namespace {

// In a bisect of a generation case in steps: the first schedule step at which the culprit on
// the candidate moves the watched tensor beyond floor_k times its error without it (the probes
// that bracket the culprit), else the step it moves most.
std::string culprit_step(const BisectReport& r, const Culprit& c) {
  if (r.steps.empty() || !c.pass_step) return "";
  const Probe *with = nullptr, *without = nullptr;
  for (const auto& p : r.trace) {
    if (p.step == c.fail_step) with = &p;
    if (p.step == c.pass_step) without = &p;
  }
  if (!with || !without) return "";
  const double k = r.watch_thresholds.floor_k;
  const auto jump = first_step_beyond(with->watched.diff.step_rel_l2, without->watched.diff.step_rel_l2, k);
  if (!jump) return "";
  const ScheduleStep& st = r.steps[jump->step];
  const std::string where = fmt::format("schedule step {}/{} ({})", jump->step + 1, r.steps.size(), report::step_where(st));
  if (jump->found)
    return fmt::format("the first step it moves {} beyond {}x: {} (rel_l2 {} with it, {} without)", r.watch.key(),
                       num(k), where, num(jump->with), num(jump->without));
  return fmt::format("it moves {} most at {} (rel_l2 {} with it, {} without: {}x)", r.watch.key(), where, num(jump->with),
                     num(jump->without), jump->without > 0 ? num(jump->with / jump->without, "{:.2f}") : "-");
}

}  // namespace

void print_bisect_body(std::FILE* out, const BisectReport& r, bool color) {
  if (r.search)
    for (const auto& c : r.search->culprits) {
      fmt::print(out, "\nculprit   {} ({}, stage {}): {} -> {}", c.stage, c.cls, c.index + 1,
                 c.pass_step ? fmt::format("PASS with stages 1-{} (step {})", c.index, c.pass_step) : "PASS with no stage on the candidate",
                 fmt::format("FAIL with 1-{} (step {})", c.index + 1, c.fail_step));
      if (const std::string s = culprit_step(r, c); !s.empty()) fmt::print(out, "\n{:10}{}", "", s);
    }
  if (r.search && !r.search->culprits.empty()) fmt::print(out, "\n");
  if (r.isolation) {
    fmt::print(out, "\nisolation: every stage on the reference's own inputs, ranked by local error ({} stages)\n",
               r.isolation->ranked.size());
    print_ranking(out, *r.isolation, !r.floor.empty(), 10, color);
  }
  if (r.leads) {
    fmt::print(out, "\ninconclusive: no split crosses the threshold on {}. The stages whose local error {} most, each "
               "on the reference's own inputs:\n",
               r.watch.key(), r.floor.empty() ? "is largest (rel_l2)" : "exceeds the floor candidate's");
    print_ranking(out, *r.leads, !r.floor.empty(), 5, color, true);
    std::size_t fails = 0;
    for (std::size_t i = 5; i < r.leads->ranked.size(); ++i) fails += r.leads->ranked[i].worst.verdict == Verdict::fail;
    if (fails) fmt::print(out, "      ... and {} more stage{} FAIL on their own inputs (leads.csv)\n", fails, fails == 1 ? "" : "s");
  }
  if (r.attribution) print_attribution(out, r, color);
  fmt::print(out, "\nresult    {}\n", r.outcome());
  for (const auto& line : divergence_story(r)) fmt::print(out, "why       {}\n", line);
  if (!r.next_command.empty()) fmt::print(out, "next      {}\n          {}\n", r.next_command, r.next_reason);
  print_totals(out, r);
  if (!r.info.command.empty()) fmt::print(out, "reproduce {}\n", r.info.command);
}

void print_bisect_terminal(std::FILE* out, const BisectReport& r, bool color) {
  print_bisect_head(out, r);
  for (const auto& p : r.trace) print_trace_row(out, r, p, color);
  print_bisect_body(out, r, color);
}

std::string render_trace_csv(const BisectReport& r) {
  std::string o =
      "step,phase,prefix,pinned,group,split,tensor,error,companion_error,floor_error,ratio,cosine,"
      "max_abs,max_abs_scaled,verdict,reason,computed,reused,cached,seconds\n";
  for (const auto& p : r.trace) {
    std::vector<std::string> pinned;
    for (auto i : p.pinned) pinned.push_back(std::to_string(i + 1));
    const WatchedError& w = p.watched;
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", p.step, p.phase, p.prefix,
                     csv_field(fmt::format("{}", fmt::join(pinned, " "))), csv_field(p.group), csv_field(p.split),
                     csv_field(w.diff.key()), full(w.error()), w.has_floor ? full(w.companion_error) : "",
                     w.has_floor ? full(w.floor_error) : "", w.has_floor ? full(w.vs_floor()) : "", full(w.diff.metrics.cosine),
                     full(w.diff.metrics.max_abs), full(w.diff.metrics.max_abs_scaled), verdict_name(w.diff.verdict),
                     csv_field(w.diff.reason), p.computed, p.reused, p.cached, full(p.seconds));
  }
  return o;
}

std::string render_isolation_csv(const IsolationResult& r) {
  std::string o =
      "rank,stage_index,stage,class,tensor,cosine,max_abs,max_abs_scaled,rmse,rel_l2,floor_error,score,verdict,reason\n";
  int rank = 0;
  for (const auto& s : r.ranked) {
    const TensorDiff& d = s.worst;
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", ++rank, s.index + 1, csv_field(s.stage),
                     csv_field(s.cls), csv_field(d.tensor), full(d.metrics.cosine), full(d.metrics.max_abs),
                     full(d.metrics.max_abs_scaled), full(d.metrics.rmse),
                     full(d.metrics.rel_l2), s.floor_error ? full(*s.floor_error) : "", full(s.score),
                     verdict_name(d.verdict), csv_field(d.reason));
  }
  return o;
}

std::string render_attribution_csv(const AttributionResult& a) {
  std::string o = "group,stages,step,error,share,vs_all,vs_floor,top1_agree,kl_mean,verdict\n";
  for (const auto& c : a.rows) {
    const auto& l = c.watched.diff.logits;
    o += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", csv_field(c.group), c.stages, c.step, full(c.watched.error()),
                     full(c.share), full(c.vs_all), full(c.watched.vs_floor()), l ? full(l->top1_agree) : "", l ? full(l->kl_mean) : "",
                     verdict_name(c.watched.diff.verdict));
  }
  return o;
}

std::string render_bisect_json(const BisectReport& r) {
  nlohmann::json j;
  j["tdiff_version"] = TDIFF_VERSION;
  j["case"] = r.info.case_name;
  j["run_id"] = r.info.run_id;
  j["command"] = r.info.command;
  j["mode"] = r.mode;
  j["candidate"] = r.candidate;
  j["floor"] = r.floor;
  j["rest"] = r.rest;  // what ran the stages after a split
  j["watch"] = {{"tensor", r.watch.key()}, {"stage_index", r.watch.index + 1}, {"stages", r.stages}};
  j["rule"] = watch_rule(r);
  j["notes"] = r.notes;
  j["outcome"] = r.outcome();
  j["exit_code"] = r.exit_code();
  const BisectTotals& t = r.totals;
  j["totals"] = {{"mixed_runs", t.mixed_runs}, {"floor_runs", t.floor_runs}, {"isolated_runs", t.isolated_runs},
                 {"computed", t.computed},     {"reused", t.reused},         {"cached", t.cached},
                 {"seconds", t.seconds}};
  nlohmann::json trace = nlohmann::json::array();
  for (const auto& p : r.trace) {
    std::vector<std::size_t> pinned;  // stage numbers, 1-based like stage_index
    for (auto i : p.pinned) pinned.push_back(i + 1);
    trace.push_back({{"step", p.step},       {"phase", p.phase},     {"prefix", p.prefix},
                     {"pinned", pinned},   {"group", p.group},     {"split", p.split},
                     {"watched", watched_json(p.watched)},           {"computed", p.computed},
                     {"reused", p.reused},   {"cached", p.cached},   {"seconds", p.seconds}});
    nlohmann::json times = nlohmann::json::object();  // where the step's time went (base/timing.h)
    for (const auto& [phase, sec] : p.times.phases()) times[phase] = std::round(sec * 1e4) / 1e4;
    trace.back()["timing_s"] = times;
  }
  j["trace"] = trace;
  if (r.search) {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& x : r.search->culprits)
      c.push_back({{"stage", x.stage}, {"class", x.cls}, {"stage_index", x.index + 1}, {"pass_step", x.pass_step},
                   {"fail_step", x.fail_step},
                   {"generation_step", r.steps.empty() ? nlohmann::json() : nlohmann::json(culprit_step(r, x))}});
    j["search"] = {{"full_fails", r.search->full_fails}, {"culprits", c}, {"passes_after", r.search->passes_after},
                   {"capped", r.search->capped}};
  }
  if (r.isolation) j["isolation"] = {{"ranked", ranking_json(*r.isolation)}, {"seconds", r.isolation->seconds}};
  if (r.leads) j["inconclusive"] = {{"leads", ranking_json(*r.leads)}, {"next_command", r.next_command},
                                     {"next_reason", r.next_reason}};
  j["run_first_fail"] = r.run_first_fail;
  j["why"] = divergence_story(r);
  if (r.attribution) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& c : r.attribution->rows)
      rows.push_back({{"group", c.group}, {"stages", c.stages}, {"step", c.step}, {"share", number(c.share)},
                      {"vs_all", number(c.vs_all)}, {"watched", watched_json(c.watched)}});
    j["attribution"] = {{"by", grouping_name(r.attribution->by)}, {"all_error", number(r.attribution->all_error)},
                        {"quadrature", number(r.attribution->quadrature)}, {"rows", rows}};
  }
  j["env"] = nlohmann::json::object();
  for (const auto& [k, v] : r.info.env) j["env"][k] = v;
  return j.dump(2) + "\n";
}

std::vector<std::string> write_bisect_reports(const std::string& dir, const BisectReport& r) {
  std::vector<std::pair<std::string, std::string>> files = {
      {"bisect.html", render_bisect_html(r)}, {"bisect.json", render_bisect_json(r)}, {"trace.csv", render_trace_csv(r)}};
  if (r.isolation) files.emplace_back("isolation.csv", render_isolation_csv(*r.isolation));
  if (r.leads) files.emplace_back("leads.csv", render_isolation_csv(*r.leads));
  if (r.attribution) files.emplace_back("attribution.csv", render_attribution_csv(*r.attribution));
  return write_report_files(dir, files);
}

}  // namespace tdiff
