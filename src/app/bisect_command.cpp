#include "app/bisect_command.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bisect/bisect.h"
#include "exec/engine_backend.h"
#include "app/envelope.h"
#include "app/history_record.h"
#include "app/candidate.h"
#include "app/progress.h"
#include "app/report_options.h"
#include "app/shell.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "base/timing.h"
#include "refcpu/refcpu_backend.h"
#include "report/bisect_report.h"

namespace tdiff::app {

namespace {

std::string flags(const BisectCmd& c) {
  std::string s;
  if (c.watch != "logits") s += " --watch " + shell_quote(c.watch);
  if (c.floor != "fixed") s += " --floor " + shell_quote(c.floor);
  if (c.mode != "search") s += " --mode " + c.mode;
  if (c.suffix != "auto") s += " --suffix " + c.suffix;
  if (c.attribute) s += " --attribute" + (c.attribute_by != "class" ? " --attribute-by " + c.attribute_by : "");
  if (c.max_culprits != 8) s += fmt::format(" --max-culprits {}", c.max_culprits);
  return s;
}

// The all-candidate run's first FAIL, for the story across `run` and `bisect`.
void note_first_fail(BisectReport& rep, const std::vector<Stage>& stages, const CompareResult& full) {
  if (full.first_fail < 0) return;
  const TensorDiff& d = full.rows[static_cast<std::size_t>(full.first_fail)];
  rep.run_first_fail = d.key();
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (stages[i].name == d.stage) rep.run_first_fail_index = i;
}

// After an inconclusive search: watching the stage that deviates most makes the search name
// it (or the earlier stage that feeds it) when its deviation is beyond the gate.
void suggest_next(BisectReport& rep, const BisectCmd& c) {
  if (rep.leads->ranked.empty()) return;
  const IsolatedStage& top = rep.leads->ranked.front();
  const double k = rep.watch_thresholds.floor_k;
  if (top.stage == rep.watch.stage) {
    // Watching the lead already: the same command again would be this run (a loop). The
    // isolation ranking is the finding.
    rep.next_reason = fmt::format(
        "the watched stage {} itself deviates most on its own inputs ({}) yet its output stays within the gate end to "
        "end: the floor's rounding its inputs carry outweighs its own deviation. The ranking above is the finding; no "
        "further bisect would name more",
        top.stage, std::isinf(top.score) ? "an error where the floor has none" : fmt::format("{:.3g}x the floor", top.score));
    return;
  }
  BisectCmd next = c;
  next.watch = top.worst.key();
  next.report.run_id.clear();
  rep.next_command = fmt::format("tdiff bisect {}{}{}", shell_quote(c.case_path), c.cand.flags(), flags(next));
  if (rep.floor.empty())
    rep.next_reason = fmt::format("bisect on {}, the stage with the largest local error, to find the stage its error "
                                  "starts at; with a floor (--floor fixed) the ranking says which errors the formats do "
                                  "not explain",
                                  top.worst.key());
  else if (top.score > k)
    rep.next_reason = fmt::format("{} deviates from the floor on its own ({}, beyond floor_k = {:g}) but the "
                                  "deviation does not reach {}: bisect on its output to confirm where it starts (if "
                                  "that crosses nothing either, the floor's rounding its inputs carry outweighs the "
                                  "fault end to end, and this isolation ranking is the finding)",
                                  top.worst.key(),
                                  std::isinf(top.score) ? "an error where the floor has none" : fmt::format("{:.3g}x", top.score),
                                  k, rep.watch.key());
  else
    rep.next_reason = fmt::format("no stage deviates more than floor_k = {:g} times the floor even on its own inputs "
                                  "(largest {:.3g}x, {}): the candidate's error is what its formats explain; to look "
                                  "closer anyway, bisect on that stage's output",
                                  k, top.score, top.worst.key());
}

// The bisection's record in the run history: environment, outcome, culprits and trace.
void record_bisect(HistoryRecord& history, const BisectCmd& c, const std::string& run_id, const EnvRecord& env,
                   const BisectReport& rep, const PhaseTimes& times) {
  history::RunEntry e = history.entry("bisect", run_id, env);
  std::vector<std::string> culprits;
  if (rep.search)
    for (const auto& x : rep.search->culprits) culprits.push_back(x.stage);
  e.verdict = culprits.empty() ? "none" : "culprit";
  e.first_divergence = culprits.empty() ? "" : culprits.front();
  e.summary = rep.outcome();
  e.attrs = {{"watch", rep.watch.key()},
             {"mode", c.mode},
             {"culprits", fmt::format("{}", fmt::join(culprits, " "))},
             {"trace_csv", render_trace_csv(rep)}};
  e.timings = times.phases();
  if (!c.report.no_reports) e.report_path = report_dir(rep.info, c.report.out_dir);
  history.commit(e);
}

// What runs the stages after a split. auto: the floor on the GPU (a forward there takes
// milliseconds, the reference's suffix seconds a layer at real widths), the reference elsewhere.
Suffix choose_suffix(const BisectCmd& c, bool has_floor) {
  if (c.suffix == "floor" && !has_floor)
    input_error("--suffix floor needs a floor (--floor none was given): the stages after a split run on it");
  return c.suffix == "floor" || (c.suffix == "auto" && has_floor && c.cand.backend == "hip") ? Suffix::floor
                                                                                            : Suffix::reference;
}

// The floor the watched output is gated against (--floor), on the candidate's backend; null
// with --floor none. `label`: "emu under fixed".
std::unique_ptr<Backend> make_floor(const BisectCmd& c, const CaseSession& session, std::string& label) {
  if (c.floor == "none") return nullptr;
  Policy fp = Policy::load(c.floor);
  fp.validate(session.stages);
  label = fmt::format("{} under {}", c.cand.backend, fp.describe());
  return make_candidate(c.cand.backend, fp, c.cand.seed, c.cand.hip_gemm);
}

// The search's callbacks: progress on stderr, the trace on stdout line by line as it runs
// (flushed: CI logs read a pipe), its head first. `live` is set before the bisector's calls.
struct TraceStream {
  BisectReport& rep;
  Bisector* live = nullptr;
  std::size_t notes_shown = 0;
  bool color = want_color(stdout);
  StatusLine status{"bisect"};

  void connect(BisectOptions& bo) {
    bo.on_progress = [this](const std::string& what, std::size_t done, std::size_t total) { status.show(what, done, total); };
    bo.on_probe = [this](const Probe& p) {
      status.clear();
      if (rep.trace.empty()) {
        rep.trace = {p};
        rep.notes = live->notes();
        rep.watch_thresholds = live->thresholds().for_tensor(rep.watch.stage, rep.watch.tensor);
        print_bisect_head(stdout, rep);
        notes_shown = rep.notes.size();
      }
      print_trace_row(stdout, rep, p, color);
      std::fflush(stdout);
      fmt::print(stderr, "timing step {}: {}\n", p.step, p.times.line());
    };
  }
};

// The search (or isolation), the leads of an inconclusive one and the attribution, into `rep`.
void run_searches(const BisectCmd& c, Bisector& bisector, BisectReport& rep, PhaseTimes& times) {
  {
    auto t = times.measure(c.mode == "search" ? "mixed runs" : "isolation");
    if (c.mode == "search") rep.search = bisector.search();
    else rep.isolation = bisector.isolate();
  }
  if (rep.search && !rep.search->full_fails) {
    auto t = times.measure("isolation");
    rep.leads = bisector.isolate();
  }
  if (c.attribute) {
    auto t = times.measure("mixed runs");
    rep.attribution = bisector.attribute(c.attribute_by == "kind" ? Grouping::op_kind : Grouping::stage_class);
  }
}

// The report's title, reproduce command and environment record.
void describe_bisect(const BisectCmd& c, const CaseSession& session, const Policy& policy, const std::string& run_id,
                     const std::string& floor_label, Suffix suffix, CaseHash& case_hash, PhaseTimes& times,
                     BisectReport& rep, EnvRecord& env, const Backend& candidate) {
  RunInfo& info = rep.info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff bisect {}: {}", std::filesystem::path(c.case_path).filename().string(), rep.candidate);
  info.command = fmt::format("tdiff bisect {}{}{}{}", shell_quote(absolute_path(c.case_path)), c.cand.flags(), flags(c),
                             c.report.flags()) + " --run-id " + shell_quote(run_id);
  env = candidate_env(c.cand.backend, policy, session.stages, nullptr, c.cand.hip_gemm);
  c.cand.note_engine(env, &candidate);
  auto hashing = times.measure("case checksum");  // the wait for CaseHash's thread
  add_run_facts(env, c.case_path, session.info.checksums, c.cand.seed, case_hash.get());
  hashing.stop();
  env.extra["floor"] = floor_label.empty() ? "none" : floor_label;
  env.extra["bisect_suffix"] = suffix == Suffix::floor ? "floor" : "reference";
  show_env(env, info);
}

// The terminal output after the search, then the report files.
void emit_bisect(const BisectCmd& c, Bisector& bisector, BisectReport& rep, const TraceStream& stream, bool streamed,
                 PhaseTimes& times) {
  const RunInfo& info = rep.info;
  const std::size_t notes_shown = stream.notes_shown;
  const bool color = stream.color;
  // The per-stage comparison of the all-candidate run (or of the isolated stages).
  const CompareResult* run_diff = nullptr;
  if (rep.search || rep.attribution) run_diff = &bisector.full_run();
  else if (rep.isolation) run_diff = &rep.isolation->diff;
  if (c.report.all_rows && run_diff) {
    TerminalOptions topt;
    topt.color = want_color(stdout);
    topt.all_rows = true;
    print_terminal(stdout, *run_diff, info, topt);
    fmt::print("\n");
  }
  if (streamed) {
    print_bisect_notes(stdout, rep, notes_shown);
    print_bisect_body(stdout, rep, color);
  } else {
    print_bisect_terminal(stdout, rep, color);
  }
  auto reports = times.measure("reports");
  if (!c.report.no_reports) {
    const std::string dir = report_dir(info, c.report.out_dir);
    if (run_diff) {
      RunInfo run_info = info;
      run_info.title = (rep.isolation && !rep.search ? "isolated stages: " : "all-candidate run: ") + rep.candidate;
      write_reports(dir, *run_diff, run_info);
      rep.has_run_report = true;
    }
    write_bisect_reports(dir, rep);
    fmt::print("reports   {}/bisect.html (and bisect.json, trace.csv{}{}{}{})\n", dir, rep.isolation ? ", isolation.csv" : "",
               rep.leads ? ", leads.csv" : "",
               rep.attribution ? ", attribution.csv" : "", rep.has_run_report ? ", report.html" : "");
  }

  reports.stop();
}

}  // namespace

int run_bisect(BisectCmd c) {
  PhaseTimes times;  // the command's; each probe prints its own line as it ends
  auto opening = times.measure("open");
  CaseSession session = open_session(c.case_path, c.cand.model_dir);
  const std::string reference_read = reference_id(session.reference().file());  // what its reads see
  if (session.reference().stages().empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  opening.stop();
  const Policy policy = c.cand.make_policy(session);
  const ThresholdPolicy thresholds = c.report.make_thresholds(output_keys(session.stages));
  const std::string run_id = app::run_id_for(c.report.run_id, "bisect");
  // Opened before the work, as run's: a case whose history cannot be written fails now.
  auto opening_history = times.measure("history");
  HistoryRecord history(c.case_path, c.history);
  history.judged_against(reference_read);
  opening_history.stop();
  c.cand.seed = app::run_seed_for(c.cand.seed, run_id);
  auto setup = times.measure("backend setup");
  auto candidate = c.cand.make(session, policy, c.cand.seed);
  std::string floor_label;
  const std::unique_ptr<Backend> floor = make_floor(c, session, floor_label);
  refcpu::RefCpuBackend reference;
  setup.stop();
  const Suffix suffix = choose_suffix(c, floor != nullptr);
  const auto ref_attrs = h5_read_attrs(session.reference().file(), "/reference");
  const auto tie = ref_attrs.find("tie_rule");
  RunContext ctx = session.context(tie == ref_attrs.end() ? TieRule::lowest_index : parse_tie_rule(tie->second));

  BisectReport rep;
  rep.mode = c.mode;
  rep.candidate = c.cand.label(policy);
  rep.floor = floor_label;
  rep.rest = suffix == Suffix::floor ? "the floor" : "the reference";
  TraceStream stream{rep};
  BisectOptions bo;
  bo.watch = c.watch;
  bo.thresholds = thresholds;
  bo.max_culprits = c.max_culprits;
  bo.suffix = suffix;
  stream.connect(bo);
  Bisector bisector(session, *candidate, reference, ctx, bo);
  stream.live = &bisector;
  if (floor) bisector.set_floor(*floor);

  rep.watch = bisector.watch();
  rep.stages = bisector.stage_count();
  rep.watch_thresholds = bisector.thresholds().for_tensor(rep.watch.stage, rep.watch.tensor);
  CaseHash case_hash(c.case_path);  // beside the bisection: the input checks are done
  run_searches(c, bisector, rep, times);
  stream.status.clear();
  const bool streamed = !rep.trace.empty();
  rep.watch_thresholds = bisector.thresholds().for_tensor(rep.watch.stage, rep.watch.tensor);  // relaxed by the floor
  rep.trace = bisector.trace();
  rep.totals = bisector.totals();
  rep.notes = bisector.notes();
  if (rep.search) note_first_fail(rep, session.stages, bisector.full_run());
  if (rep.search) rep.steps = bisector.full_run().steps;
  if (rep.leads) suggest_next(rep, c);
  EnvRecord env;
  describe_bisect(c, session, policy, run_id, floor_label, suffix, case_hash, times, rep, env, *candidate);
  emit_bisect(c, bisector, rep, stream, streamed, times);

  auto recording = times.measure("record");
  record_bisect(history, c, run_id, env, rep, times);
  recording.stop();
  fmt::print(stderr, "timing: {}\n", times.line());
  if (const auto* engine = dynamic_cast<const EngineBackend*>(candidate.get()))
    fmt::print(stderr, "engine: {} runs of '{}' in {:.2f} s\n", engine->invocations(), c.cand.candidate_cmd, engine->seconds());
  return rep.exit_code();
}

}  // namespace tdiff::app
