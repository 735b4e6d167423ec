#include "app/determinism_command.h"

#include <omp.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checks/determinism.h"
#include "app/envelope.h"
#include "app/history_record.h"
#include "app/candidate.h"
#include "app/progress.h"
#include "app/tp_sweep.h"
#include "app/shell.h"
#include "exec/backend_registry.h"
#include "exec/engine_backend.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "report/report.h"

namespace tdiff::app {

namespace {

BackendFactory factory(const DeterminismCmd& c, CaseSession& session, const Policy& policy) {
  if (!c.cand.candidate_cmd.empty())  // the engine, run once per run
    return [&session, cmd = c.cand.candidate_cmd, policy](std::uint64_t seed) -> std::unique_ptr<Backend> {
      return std::make_unique<EngineBackend>(cmd, session, policy, seed);
    };
  make_candidate(c.cand.backend, policy, 0, c.cand.hip_gemm);  // an input error here for a backend this build lacks
  return [backend = c.cand.backend, gemm = c.cand.hip_gemm, policy](std::uint64_t seed) {
    return make_candidate(backend, policy, seed, gemm);
  };
}

std::string command_line(const DeterminismCmd& c, const std::string& run_id) {
  std::string s = fmt::format("tdiff determinism {} {}", shell_quote(absolute_path(c.case_path)),
                              c.cand.candidate_cmd.empty() ? "--backend " + c.cand.backend
                                                           : "--candidate-cmd " + shell_quote(c.cand.candidate_cmd));
  if (c.cand.backend != "refcpu") {
    s += " --policy " + shell_quote(c.cand.policy);
    for (const auto& x : c.cand.sets) s += " --set " + shell_quote(x);
  }
  s += fmt::format(" --seed {}", c.cand.seed);
  if (!c.tp_sweep.empty()) {
    s += fmt::format(" --tp-sweep {} --orders {}", fmt::join(c.tp_sweep, ","), fmt::join(c.orders, ","));
  } else if (c.batch_sweep.empty()) {
    s += fmt::format(" --runs {}", c.runs);
    if (c.on_device) s += " --on-device";
    if (!c.threads.empty()) s += fmt::format(" --threads {}", fmt::join(c.threads, ","));
  } else {
    s += fmt::format(" --batch-sweep {} --pad-side {}", fmt::join(c.batch_sweep, ","), c.pad_side);
  }
  if (!c.stages.empty()) s += " --stages " + shell_quote(c.stages);
  return s + " --run-id " + run_id;
}

// One line per finding; origins (the stage differed although its inputs did not) marked '*'.
void print_findings(const std::vector<Finding>& findings, const std::string& where_word, bool all_rows,
                    const std::function<std::string(const Finding&)>& note) {
  if (findings.empty()) return;
  fmt::print("  {:<28} {:<7} {:>10} {:>20}  {}\n", "stage", "tensor", "max |diff|", "elements (worst)", where_word);
  std::size_t shown = 0;
  for (const auto& f : findings) {
    if (!all_rows && !f.origin && shown >= 30) continue;
    ++shown;
    fmt::print("{} {:<28} {:<7} {:>10.3g} {:>20}  {}\n", f.origin ? '*' : ' ', f.stage, f.tensor, f.max_abs,
               fmt::format("{}/{}", f.differing, f.numel), fmt::join(f.where, ","));
    const std::string why = note ? note(f) : "";
    if (f.origin && !why.empty()) fmt::print("      {}\n", why);
  }
  if (shown < findings.size())
    fmt::print("  ({} more tensors differ only downstream of an origin; --all lists them)\n", findings.size() - shown);
  fmt::print("  * origin: the stage's output differed while all of its inputs were identical\n");
}

// What a check found, for the verdict line, the reports and the case's record.
struct Outcome {
  CompareResult table;
  bool ok = true;
  std::string verdict, summary;
};

std::string first_finding(const std::vector<Finding>& findings) {
  const Finding& f = findings.front();
  return fmt::format("{} tensors differ; first {} ({}: max |diff| {:.3g} in {} of {} elements)", findings.size(), f.key(),
                     f.worst, f.max_abs, f.differing, f.numel);
}

Outcome run_to_run(const DeterminismCmd& c, CaseSession& session, const BackendFactory& make,
                   const std::string& policy_text, EnvRecord& env) {
  DeterminismOptions o;
  o.runs = c.runs;
  o.threads = c.threads;
  o.seed = c.cand.seed;
  o.stages = c.stages;
  std::unique_ptr<DeviceComparison> on_device;
  if (c.on_device) {
    on_device = backend_entry(c.cand.backend).device_comparison();
    o.on_device = on_device.get();
    env.extra["compared_on"] = "the device (--on-device)";
  }
  const std::size_t n = session.stages.size();
  Progress progress("determinism", static_cast<std::size_t>(std::max<int>(c.runs, static_cast<int>(c.threads.size()))) * n);
  o.progress = [&](const RunSpec& r, const Stage& s, std::size_t i) {
    progress.step(static_cast<std::size_t>(r.number - 1) * n + i + 1, fmt::format("run {}: {}", r.number, s.name));
  };
  DeterminismResult r = check_determinism(session, make, o);
  progress.finish(fmt::format("determinism: {} runs of {} stages on {} in {:.2f} s", r.runs.size(), n,
                              c.cand.candidate_cmd.empty() ? c.cand.backend : "the engine", r.seconds));
  for (std::size_t i = 0; i < r.run_times.size(); ++i)
    if (!r.run_times[i].phases().empty()) fmt::print(stderr, "timing run {}: {}\n", i + 1, r.run_times[i].line());
  fmt::print("determinism {}: {}\n", c.case_path, c.cand.candidate_cmd.empty() ? c.cand.backend + " under " + policy_text
                                                                             : "engine '" + c.cand.candidate_cmd + "'");
  for (const auto& spec : r.runs) fmt::print("  {}\n", spec.label());
  print_findings(r.findings, "runs differing from run 1", c.all_rows, {});
  std::vector<std::string> seeds, threads;
  for (const auto& s : r.runs) seeds.push_back(std::to_string(s.seed)), threads.push_back(std::to_string(s.threads));
  env.extra["runs"] = std::to_string(r.runs.size());
  env.extra["run_seeds"] = fmt::format("{}", fmt::join(seeds, ","));
  env.extra["run_threads"] = fmt::format("{}", fmt::join(threads, ","));
  Outcome out;
  out.ok = r.deterministic();
  out.verdict = out.ok ? "DETERMINISTIC" : "NONDETERMINISTIC";
  out.summary = out.ok ? fmt::format("all {} stages bit-identical in {} runs", n, r.runs.size()) : first_finding(r.findings);
  out.table = std::move(r.table);
  return out;
}

}  // namespace

Outcome batch_sweep(const DeterminismCmd& c, CaseSession& session, const BackendFactory& make, const Policy& policy,
                    const std::string& policy_text, EnvRecord& env) {
  BatchSweepOptions o;
  o.sizes = c.batch_sweep;
  o.pad_left = c.pad_side == "both" ? std::vector<bool>{false, true} : std::vector<bool>{c.pad_side == "left"};
  o.seed = c.cand.seed;
  o.stages = c.stages;
  std::optional<Progress> progress;
  o.progress = [&](std::size_t i, std::size_t n, const SweepBatch& b) {
    if (!progress) progress.emplace("batch sweep", n);
    progress->step(i + 1, b.label());
  };
  BatchSweepResult r = check_batch_invariance(session, make, o);
  if (!progress) progress.emplace("batch sweep", 0);
  progress->finish(fmt::format("batch sweep: {} prompts in {} batches on {} in {:.2f} s", r.prompts, r.batches.size(),
                               c.cand.backend, r.seconds));
  fmt::print("batch invariance {}: {} under {}, {} prompts, sizes {}, {} padding\n", c.case_path, c.cand.backend,
             policy_text, r.prompts, fmt::join(c.batch_sweep, ","), c.pad_side);
  fmt::print("  {:>5} {:>8} {:>18} {:>11}  {}\n", "size", "batches", "tensors differing", "max |diff|", "first origin");
  for (const auto& s : r.sizes)
    fmt::print("  {:>5} {:>8} {:>18} {:>11.3g}  {}\n", s.size, s.batches, s.tensors_differing, s.max_abs,
               s.first_origin.empty() ? "-" : s.first_origin);
  std::map<std::string, const Stage*> by_name;
  for (const auto& s : session.stages) by_name[s.name] = &s;
  auto why = [&](const std::string& stage) { return known_batch_variance(c.cand.backend, policy, *by_name.at(stage)); };
  print_findings(r.findings, "batches differing from the prompt alone", c.all_rows,
                 [&](const Finding& f) { return why(f.stage); });
  if (!r.findings.empty())
    for (std::size_t i = 0; i < r.batches.size(); ++i) fmt::print("  batch {:>3}: {}\n", i, r.batches[i].label());
  for (auto& row : r.table.rows)
    if (row.verdict == Verdict::fail && row.reason.find("origin") != std::string::npos && !why(row.stage).empty())
      row.reason += "; " + why(row.stage);
  env.extra["batch_sweep"] = fmt::format("{}", fmt::join(c.batch_sweep, ","));
  env.extra["pad_side"] = c.pad_side;
  Outcome out;
  out.ok = r.invariant();
  out.verdict = out.ok ? "BATCH-INVARIANT" : "NOT BATCH-INVARIANT";
  out.summary = out.ok ? fmt::format("every prompt's outputs bit-identical in all {} batches", r.batches.size())
                       : first_finding(r.findings);
  out.table = std::move(r.table);
  return out;
}

Outcome tp_sweep(const DeterminismCmd& c, CaseSession& session, const Policy& policy, EnvRecord& env) {
  TpSweepOptions o;
  o.sizes = c.tp_sweep;
  o.orders = c.orders;
  o.seed = c.cand.seed;
  o.stages = c.stages;
  o.all_rows = c.all_rows;
  TpSweepOutcome r = run_tp_sweep(session, policy, o);
  env.extra["tp_sweep"] = fmt::format("{}", fmt::join(c.tp_sweep, ","));
  env.extra["tp_sweep_splits"] = r.configs;
  return Outcome{std::move(r.table), r.ok, r.verdict, r.summary};
}

int run_determinism(DeterminismCmd c) {
  CaseSession session = open_session(c.case_path, c.cand.model_dir);
  const std::string reference_read = reference_id(session.reference().file());  // what its reads see
  const bool refcpu = c.cand.backend == "refcpu";
  const Policy policy = refcpu ? Policy::preset("fixed") : c.cand.make_policy(session);
  const std::string policy_text = refcpu ? "float64" : policy.describe();
  if (c.threads.empty() && refcpu && c.batch_sweep.empty()) c.threads = {1, 2, 4};
  if (c.pad_side.empty()) c.pad_side = session.info.pad_side;
  const bool sweep = !c.batch_sweep.empty();
  const bool split_sweep = !c.tp_sweep.empty();
  if (split_sweep && (sweep || c.on_device || c.cand.backend != "emu" || !c.cand.candidate_cmd.empty()))
    input_error("--tp-sweep runs emu's model of each split: it takes --backend emu, without --batch-sweep or --on-device");
  if (c.on_device && sweep)
    input_error("--on-device compares runs of one batch with each other; --batch-sweep compares slices of different "
                "batches on the host (leave one of them out)");
  if (c.on_device && !backend_entry(c.cand.backend).device_comparison)
    input_error("--on-device: backend {} compares on the host (only hip keeps its outputs on a device)", c.cand.backend);
  const std::string kind = split_sweep ? "tp-sweep" : sweep ? "batch-sweep" : "determinism";
  const std::string run_id = app::run_id_for(c.run_id, kind);
  c.cand.seed = app::run_seed_for(c.seed_given ? c.cand.seed : 0, run_id);
  if (!c.cand.candidate_cmd.empty() && (sweep || c.on_device || !c.threads.empty()))
    input_error("--candidate-cmd runs your engine whole, run after run: --batch-sweep, --on-device and --threads are "
                "tdiff's backends' own");
  const BackendFactory make = factory(c, session, policy);

  EnvRecord env = refcpu ? capture_env(c.cand.backend, policy_text, process_command_line())
                         : candidate_env(c.cand.backend, policy, session.stages, nullptr, c.cand.hip_gemm);
  c.cand.note_engine(env, nullptr);
  // Opened before the runs, as run's: a case whose history cannot be written fails now.
  HistoryRecord history(c.case_path, c.history);
  history.judged_against(reference_read);
  CaseHash case_hash(c.case_path);
  Outcome o = split_sweep ? tp_sweep(c, session, policy, env)
              : sweep     ? batch_sweep(c, session, make, policy, policy_text, env)
                          : run_to_run(c, session, make, policy_text, env);
  add_run_facts(env, c.case_path, session.info.checksums, c.cand.seed, case_hash.get());
  auto& [table, ok, verdict, summary] = o;
  const std::string command = command_line(c, run_id);
  fmt::print("verdict     {}: {}\n", verdict, summary);
  fmt::print("reproduce   {}\n", command);

  RunInfo info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff determinism {}: {} under {} — {}", std::filesystem::path(c.case_path).filename().string(),
                           c.cand.backend, policy_text, verdict);
  info.command = command;
  show_env(env, info);
  if (!c.no_reports) {
    const std::string dir = report_dir(info, c.out_dir);
    write_reports(dir, table, info);
    fmt::print("reports     {}/report.html (and report.csv, report.json, junit.xml)\n", dir);
  }

  history::RunEntry e = history.entry(kind, run_id, env);
  e.policy = policy_text;
  e.verdict = verdict;
  e.summary = summary;
  e.attrs = {{"report_csv", render_csv(table)}};
  if (!c.no_reports) e.report_path = report_dir(info, c.out_dir);
  history.commit(e);
  return ok ? 0 : 1;
}

}  // namespace tdiff::app
