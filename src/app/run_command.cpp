#include "app/run_command.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exec/measured_floor.h"
#include "exec/candidate_dump.h"
#include "exec/engine_backend.h"
#include "exec/followed_reference.h"
#include "exec/mixed_run.h"
#include "exec/saved_run.h"
#include "exec/timed_forward.h"
#include "app/envelope.h"
#include "app/candidate.h"
#include "app/progress.h"
#include "exec/prefill_vs_decode.h"
#include "app/report_options.h"
#include "app/shell.h"
#include "app/history_record.h"
#include "app/speed.h"
#include "app/weight_check.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "base/file_lock.h"
#include "casefile/h5io.h"
#include "model/pattern.h"
#include "base/timing.h"
#include "diff/expected.h"
#include "checks/model_stats.h"
#include "report/stats_report.h"
#include "refcpu/refcpu_backend.h"
#include "report/summary.h"

namespace tdiff::app {

namespace {

// The model statistics section of report.html (and stats.csv/json with --stats); a note instead
// when the reference lacks what they need (a partial golden).
void add_model_stats(CaseSession& session, const RunCmd& c, RunInfo& info) {
  if (c.report.no_reports && !c.stats) return;
  std::optional<ModelStats> m;
  try {
    m = compute_model_stats(session);
  } catch (const InputError& e) {
    fmt::print("model statistics: not in the report ({})\n", e.what());
    return;
  }
  info.stats_html = render_stats_html(*m);
  if (c.stats && !c.report.no_reports)
    write_report_files(report_dir(info, c.report.out_dir),
                       {{"stats.csv", render_stats_csv(*m)}, {"stats.json", render_stats_json(*m)}});
}

void print_first_divergence(const CompareResult& diff) {
  if (diff.first_fail >= 0) {
    const TensorDiff& d = diff.rows[static_cast<std::size_t>(diff.first_fail)];
    // Integer selections: agreement only (a distance between expert ids means nothing).
    const std::string numbers =
        d.kind == TensorKind::routing || d.kind == TensorKind::exact
            ? report::error_text(d)
            : fmt::format("cosine {:.6f}, rel_l2 {:.3g}, expected {}", d.metrics.cosine, d.metrics.rel_l2,
                          report::expected_text(d));
    const std::string where = report::where_text(diff, d);
    fmt::print("first divergence: {} ({}): {}{}\n", d.key(), numbers, d.reason, where.empty() ? "" : "; " + where);
    fmt::print("  the first tensor whose own error crosses its thresholds; `tdiff bisect` names the first stage whose\n"
               "  error makes the logits fail, which can be another one (its report says why)\n");
  } else {
    fmt::print("first divergence: none (no stage fails its thresholds)\n");
  }
}

// A run's record in the run history (app/history_record.h: opened before the work, written at
// the end). --save writes the candidate's tensors into the case as they come, so its update is
// opened at the start and holds the case's lock through the run; nothing else writes the case.
class RunRecord {
 public:
  explicit RunRecord(const RunCmd& c) : history_(c.case_path, c.history) {
    // --save may replace an earlier run's tensors of the same run id, which a byte copy would
    // keep as dead space.
    if (c.save) update_.emplace(c.case_path, H5Writer::Copy::objects);
  }
  std::optional<CaseUpdate>& save_target() { return update_; }
  // The reference the run judges against: through the file its reads go through.
  void judged_against(const H5File& file) { history_.judged_against(reference_id(file)); }
  history::RunEntry entry(const std::string& run_id, const EnvRecord& env, const CompareResult& diff) const {
    history::RunEntry e = history_.entry("run", run_id, env);
    history::add_compare(e, diff);
    return e;
  }
  // The record in the history; the saved tensors (--save) into the case.
  void commit(const history::RunEntry& e) {
    history_.commit(e);
    if (update_) update_->commit();
  }

 private:
  HistoryRecord history_;
  std::optional<CaseUpdate> update_;
};

// The stages a dump lacks, in one line (the report lists every missing tensor).
void print_lacking(const CandidateDump& dump, std::size_t with_reference) {
  if (!dump.extra.empty())
    fmt::print("dump has {} tensor{} no stage produces, not compared: {}{}\n", dump.extra.size(),
               dump.extra.size() == 1 ? "" : "s", dump.extra.front(), dump.extra.size() > 1 ? ", ..." : "");
  const auto& l = dump.lacking_stages;
  if (l.empty()) return;
  std::vector<std::string> shown(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(l.size(), 6)));
  fmt::print("dump lacks {} of {} stages with a reference: {}{}\n", l.size(), with_reference, fmt::join(shown, ", "),
             l.size() > shown.size() ? ", ..." : "");
}

// A dump whose embedding is not this case's, although it records no other inputs: the one
// stage that reads only the token ids differs like another prompt's would (cosine far from 1).
void hint_other_inputs(const CandidateDump& dump, const CompareResult& diff) {
  if (!dump.inputs_sha256.empty()) return;  // checked exactly (check_dump_case)
  for (const auto& d : diff.rows)
    if (d.key() == "embed/e" && d.metrics.cosine < 0.9)
      fmt::print("hint: the dump's embed/e is not this case's embedding (cosine {:.3f}): was it written on other token "
                 "ids? A dump that records its inputs (the tap's tdiff_tap_case) is refused when they differ\n",
                 d.metrics.cosine);
}

// An isolated dump (each stage on the reference's inputs): stages ranked by local error, as
// `tdiff bisect --mode isolate --floor none` ranks tdiff's own backends.
void print_local_ranking(const CompareResult& diff) {
  const std::vector<const TensorDiff*> rows = rank_by_local_error(diff);
  fmt::print("isolated stages (each on the reference's inputs), ranked by local error (rel_l2; mismatch share for "
             "selections):\n");
  for (std::size_t i = 0; i < rows.size() && i < 10; ++i)
    fmt::print("{:>4}  {:<40} {:>10.3g}  {}\n", i + 1, rows[i]->key(), local_error(*rows[i]), verdict_name(rows[i]->verdict));
}

// An external implementation has no tdiff policy: --dump-policy names the formats it stores
// in (a bf16 port: fixed), so its tensors get the tolerances from precision a backend's get;
// without it they are judged by the scaled rule, as compare judges two dumps.
void print_not_replayed(const MixedRunResult& r) {
  if (r.not_replayed.empty()) return;
  fmt::print("selections: {} of {} selection stages not replayed (no stored reference: {}{}); later stages follow the "
             "candidate's own choices there\n",
             r.not_replayed.size(), r.not_replayed.size() + r.replayed, r.not_replayed.front(),
             r.not_replayed.size() > 1 ? ", ..." : "");
}

void print_floor(const FloorRun& f) {
  fmt::print("floor: emu under {} in {:.2f} s, the measured floor of {} tensors (a verdict needs both rules: "
             "--measured-floor off for the a-priori one alone)\n",
             f.label, f.seconds, f.rows);
}

void set_dump_expected(const RunCmd& c, std::optional<CaseSession>& session, const CandidateDump& dump,
                       CompareResult& diff) {
  if (c.dump_policy.empty()) {
    fmt::print("note: no --dump-policy, so no expected errors: judged by the scaled rule (tdiff compare's); "
               "--dump-policy fixed models a bf16 port\n");
    return;
  }
  if (!session) input_error("--dump-policy: the expected errors need the model's weights (give --model)");
  Policy policy = Policy::load(c.dump_policy);
  policy.validate(session->stages);
  set_expected(diff, {&*session, &policy, dump.mode == "isolated" ? StageInputs::reference : StageInputs::run, nullptr});
  // An isolated dump's stages read the reference's inputs, which a whole-model floor run does not.
  if (c.measured_floor == "on" && dump.mode != "isolated") {
    MixedRunOptions mo;
    mo.compare = c.stages;
    print_floor(attach_measured_floor(*session, policy, mo, diff));
  }
}

// `engine_seconds`: the engine's wall time when tdiff ran it (--candidate-cmd), else negative.
int run_dump(RunCmd c, double engine_seconds = -1) {
  if (reference_stages(c.case_path).empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  RunRecord record(c);
  // The model is needed only for the routing bias that router flips are explained against; a
  // case attached to a ticket may travel without it.
  std::optional<CaseSession> session;
  try {
    session.emplace(open_session(c.case_path, c.cand.model_dir));
  } catch (const InputError& e) {
    if (!c.cand.model_dir.empty()) throw;
    fmt::print("note: without the model ({}), router flips are not checked against the routing bias\n", e.what());
  }
  const WeightCheck checked = session ? c.weights.check(*session) : WeightCheck{};
  const std::vector<Stage> stages = session ? session->stages : build_stages(read_case(c.case_path).config);
  const CandidateDump dump = open_candidate_dump(c.case_path, stages, c.dump, c.dump_group);
  record.judged_against(*dump.case_file);
  const ThresholdPolicy thresholds = c.report.make_thresholds(output_keys(stages));
  const std::string run_id = app::run_id_for(c.report.run_id, "run");
  CompareOptions opt;
  opt.stages = c.stages;
  std::string selections;
  CompareResult diff = compare_dump(c.case_path, session ? &*session : nullptr, stages, dump, opt, selections);
  if (!selections.empty()) fmt::print("{}\n", selections);
  set_dump_expected(c, session, dump, diff);
  judge(diff, thresholds);

  const auto engine = dump.env.find("engine");
  const std::string what = fmt::format("{}{}", std::filesystem::path(c.dump).filename().string(),
                                       engine == dump.env.end() ? "" : " (" + engine->second + ")");
  RunInfo info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff run {}: dump {}{}", std::filesystem::path(c.case_path).filename().string(), what,
                           dump.mode == "isolated" ? ", each stage isolated on the reference's inputs" : "");
  const std::string source = c.cand.candidate_cmd.empty() ? "--candidate-dump " + shell_quote(absolute_path(c.dump))
                                                          : "--candidate-cmd " + shell_quote(c.cand.candidate_cmd);
  info.command = fmt::format("tdiff run {} {}{}{}{}", shell_quote(absolute_path(c.case_path)), source,
                             c.dump_group == "/" ? "" : " --dump-group " + shell_quote(c.dump_group),
                             c.cand.model_dir.empty() ? "" : " --model " + shell_quote(absolute_path(c.cand.model_dir)),
                             c.report.flags() + (c.dump_policy.empty() ? "" : " --dump-policy " + shell_quote(c.dump_policy))) +
                 (c.stages.empty() ? "" : " --stages " + shell_quote(c.stages)) + " --run-id " + shell_quote(run_id);
  EnvRecord env = capture_env("dump", "the dump's own", process_command_line());
  add_run_facts(env, c.case_path, dump.case_info.checksums, std::nullopt);
  env.extra["dump"] = absolute_path(c.dump) + ":" + c.dump_group;
  env.extra["dump_mode"] = dump.mode;
  env.extra["dump_policy"] = c.dump_policy.empty() ? "none (scaled rule)" : c.dump_policy;
  for (const auto& [k, v] : dump.env) env.extra["dump." + k] = v;
  if (session) env.extra["weights"] = c.weights.note(checked);
  show_env(env, info);
  c.report.print(diff, info);
  c.report.write(diff, info);  // before the record: a report that cannot be written leaves the case as it was
  history::RunEntry entry = record.entry(run_id, env, diff);
  entry.selections = dump.mode;
  entry.attrs = {{"dump", absolute_path(c.dump)}, {"dump_mode", dump.mode}};
  if (engine_seconds >= 0) entry.timings.emplace_back("engine", engine_seconds);
  if (!c.report.no_reports) entry.report_path = report_dir(info, c.report.out_dir);
  record.commit(entry);
  print_lacking(dump, reference_stages(*dump.case_file).size());
  hint_other_inputs(dump, diff);
  const Tensor& mask = dump.case_info.batch.mask;
  std::int64_t real = 0;
  for (auto m : mask.span<const std::uint8_t>()) real += m != 0;
  if (real < mask.numel())
    fmt::print("judged on real tokens only: {} of {} positions (padding is the implementation's own)\n", real, mask.numel());
  if (dump.mode == "isolated") print_local_ranking(diff);
  print_first_divergence(diff);
  return diff.verdict == Verdict::fail ? 1 : 0;
}

// --candidate-cmd: the engine run once on the case (its own choices, or the reference's with
// --selections replay), its dump judged as --candidate-dump's.
int run_engine_dump(RunCmd c) {
  const EngineFolder folder;
  EngineRequest r;
  r.case_path = absolute_path(c.case_path);
  r.dump_path = folder.path() + "/dump.h5";
  r.mode = c.selections_given && c.selections == "replay" ? "replay" : "run";
  const double seconds = run_engine(c.cand.candidate_cmd, r, folder.path() + "/request.json");
  fmt::print("engine: '{}' ran in {:.2f} s\n", c.cand.candidate_cmd, seconds);
  c.dump = r.dump_path;
  return run_dump(c, seconds);
}

}  // namespace

// A --save-to file's writer, under the file's lock while the run writes it.
struct SaveFile {
  std::optional<FileLock> lock;
  std::unique_ptr<H5Writer> writer;
};

// --save / --save-to: where the candidate's outputs of the compared stages go, as they come,
// under /runs/<run-id>/<stage>/<tensor> (what `tdiff compare --group-b /runs/<run-id>` reads).
// Null when not saving; `own` holds the writer of a --save-to file.
H5Writer* save_sink(const RunCmd& c, std::optional<CaseUpdate>& update, SaveFile& own, const std::string& run_id) {
  // A run id used again keeps nothing of the old run: removed here when --save writes into
  // the case, else with the record (the case's copy is still being made beside the run).
  if (update && c.save) update->writer().remove("/runs/" + run_id);
  if (c.save_to.empty() && !c.save) return nullptr;
  if (!c.save_to.empty() && std::filesystem::exists(c.save_to) && std::filesystem::equivalent(c.save_to, c.case_path))
    input_error("--save-to {}: that is the case file (use --save to keep the tensors in it)", c.save_to);
  if (!c.save_to.empty()) {  // an existing file gains this run, as a case does; under its lock, as a case's update
    own.lock.emplace(c.save_to, "tdiff run --save-to");
    own.writer = std::make_unique<H5Writer>(c.save_to, std::filesystem::exists(c.save_to) ? c.save_to : "");
    own.writer->remove("/runs/" + run_id);
    return own.writer.get();
  }
  return &update->writer();
}

// What a run was judged under, for a compare of its saved tensors (exec/saved_run.h) and its record.
SavedRun judged_under(const RunCmd& c, const Policy& policy) {
  SavedRun judged{c.cand.backend, policy.describe(), c.selections, c.stages, {}, c.report.overrides};
  judged.measured_floor = c.measured_floor == "on";
  if (!c.report.thresholds.empty())
    judged.thresholds = named_thresholds(c.report.thresholds) ? c.report.thresholds : absolute_path(c.report.thresholds);
  return judged;
}

// --save / --save-to: the saved group's attributes, and a --save-to file committed.
void finish_saved(const RunCmd& c, const SavedRun& judged, const std::string& run_id, H5Writer* sink, SaveFile& save_file) {
  if (sink) {
    sink->set_attr("/runs/" + run_id, "case", absolute_path(c.case_path));
    for (const auto& [k, v] : judged.attrs()) sink->set_attr("/runs/" + run_id, k, v);
  }
  if (save_file.writer) {
    save_file.writer->commit();
    save_file.lock.reset();
  }
}

// The report's title and reproduce command of a backend's run.
RunInfo backend_run_info(const RunCmd& c, const Policy& policy, const std::string& run_id, bool replayed, bool forced) {
  RunInfo info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff run {}: {} under {}{}", std::filesystem::path(c.case_path).filename().string(),
                           c.cand.backend, policy.describe(), replayed ? ", selections replayed from the reference" : "");
  info.command = fmt::format("tdiff run {}{}{}", shell_quote(absolute_path(c.case_path)), c.cand.flags(), c.report.flags()) +
                 (c.stages.empty() ? "" : " --stages " + shell_quote(c.stages)) + " --selections " + c.selections +
                 " --run-id " + shell_quote(run_id) + (forced ? " --force" : "") +
                 (c.measured_floor == "on" ? "" : " --measured-floor off");
  return info;
}

// A backend's run: every stage on the candidate, compared as it goes.
// --p-vs-d needs a generation case and a candidate that runs its steps: one line, before the run.
static void check_p_vs_d(const RunCmd& c, const CaseSession& session, const Backend& candidate) {
  if (!session.info.schedule.generation())
    input_error("{}: --p-vs-d needs a generation case (tdiff case new --decode or --generate)", c.case_path);
  if (!candidate.runs_steps())
    input_error("--p-vs-d: {} runs a generation case as one prefill only (emu and refcpu run steps)", c.cand.backend);
}

static PrefillVsDecode timed_p_vs_d(CaseSession& session, Backend& candidate, PhaseTimes& times) {
  auto own = times.measure("p_vs_d");
  return prefill_vs_decode(session, candidate);
}

static int run_backend(RunCmd c) {
  PhaseTimes times;  // printed last (stderr) and kept in report.json
  auto recording = times.measure("record open");
  RunRecord record(c);  // first: --save's update takes the case's lock before the session reads the case
  recording.stop();
  auto opening = times.measure("open");
  CaseSession session = open_session(c.case_path, c.cand.model_dir);
  record.judged_against(session.reference().file());
  if (session.reference().stages().empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  opening.stop();
  auto checking = times.measure("weight check");
  const WeightCheck checked = c.weights.check(session);
  checking.stop();
  const Policy policy = c.cand.make_policy(session);
  const ThresholdPolicy thresholds = c.report.make_thresholds(output_keys(session.stages));
  const std::string run_id = app::run_id_for(c.report.run_id, "run");
  c.cand.seed = app::run_seed_for(c.cand.seed, run_id);
  auto setup = times.measure("backend setup");
  auto candidate = make_candidate(c.cand.backend, policy, c.cand.seed, c.cand.hip_gemm);
  refcpu::RefCpuBackend reference;
  setup.stop();
  if (c.p_vs_d) check_p_vs_d(c, session, *candidate);

  SaveFile save_file;  // --save writes into the case update, opened above, during the run
  H5Writer* sink = save_sink(c, record.save_target(), save_file, run_id);
  CaseHash case_hash(c.case_path);  // beside the run: the input checks are done

  Progress progress(fmt::format("run {}", c.cand.backend), session.stages.size());
  MixedRunOptions mo;
  LogitsHash compared_logits(mo.diff.logits_patterns);  // --timed: what the timed forwards must reproduce
  if (sink || c.timed > 0)
    mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) {
      if (c.timed > 0) compared_logits.add(s, out);
      if (!sink || !pattern_matches(c.stages, s.name)) return;
      for (std::size_t k = 0; k < out.size(); ++k) sink->write("/runs/" + run_id + "/" + s.name + "/" + s.outputs[k], out[k]);
    };
  mo.compare = c.stages;
  mo.replay_selections = c.selections == "replay";
  mo.follow_selections = true;  // free: judged on its own path
  mo.progress = [&](const Stage& s, std::size_t i) { progress.step(i + 1, s.name); };
  mo.as_prefill = c.as_prefill;
  Progress steps(fmt::format("run {} step", c.cand.backend), session.info.schedule.steps(session.info.batch.seq()).size());
  mo.on_step = [&](std::size_t j, std::size_t) { steps.step(j + 1, "against the cache"); };
  RunContext ctx = session.context();
  MixedRunResult r = run_mixed(session, *candidate, reference, std::vector<bool>(session.stages.size(), true), ctx, mo);
  times.add(r.times);
  progress.finish(fmt::format("run: {} stages on {} in {:.2f} s", r.on_candidate, c.cand.backend, r.seconds));
  if (mo.replay_selections) print_not_replayed(r);
  if (c.measured_floor == "on") {
    auto flooring = times.measure("measured floor");
    print_floor(attach_measured_floor(session, policy, mo, r.diff));
  }
  if (c.p_vs_d) r.diff.p_vs_d = timed_p_vs_d(session, *candidate, times);
  auto judging = times.measure("judge");
  judge(r.diff, thresholds);
  judging.stop();
  history::SpeedRecord speed;
  if (c.timed > 0) {
    auto timing = times.measure("timed forwards");
    speed = measure_speed(session, *candidate, c.selections == "replay", c.timed, compared_logits.hex(), r.diff,
                          thresholds);
    print_speed(speed);
  }

  RunInfo info = backend_run_info(c, policy, run_id, r.replayed > 0, !checked.changed.empty());
  EnvRecord env = candidate_env(c.cand.backend, policy, session.stages, candidate.get());
  auto hashing = times.measure("case checksum");  // the wait for CaseHash's thread
  add_run_facts(env, c.case_path, session.info.checksums, c.cand.seed, case_hash.get());
  hashing.stop();
  env.extra["weights"] = c.weights.note(checked);
  show_env(env, info);
  auto stats = times.measure("model stats");
  add_model_stats(session, c, info);
  stats.stop();
  c.report.print(r.diff, info);
  auto saving = times.measure("save");
  const SavedRun judged = judged_under(c, policy);
  finish_saved(c, judged, run_id, sink, save_file);
  saving.stop();
  info.timing = times.phases();
  info.timing.emplace_back("total", times.since_start());  // up to the reports
  auto reports = times.measure("reports");
  c.report.write(r.diff, info);  // before the record: a report that cannot be written leaves the case as it was
  reports.stop();
  auto recording_end = times.measure("record");
  history::RunEntry entry = record.entry(run_id, env, r.diff);
  entry.selections = c.selections;
  for (const auto& [k, v] : judged.attrs()) entry.attrs[k] = v;
  entry.timings = info.timing;
  entry.speed = speed;
  if (!c.report.no_reports) entry.report_path = report_dir(info, c.report.out_dir);
  record.commit(entry);
  if (sink) fmt::print("saved       candidate tensors under {}:/runs/{}\n", c.save_to.empty() ? c.case_path : c.save_to, run_id);
  recording_end.stop();

  print_first_divergence(r.diff);
  fmt::print(stderr, "timing: {}\n", times.line());
  return r.diff.verdict == Verdict::fail ? 1 : 0;
}

int run_run(RunCmd c) {
  // Before anything is opened or created (the run history): a bad id is refused first.
  if (!c.report.run_id.empty()) check_run_id(c.report.run_id, "--run-id");
  if (!c.dump_policy.empty() && c.dump.empty() && c.cand.candidate_cmd.empty())
    input_error("--dump-policy needs --candidate-dump or --candidate-cmd");
  if (!c.cand.candidate_cmd.empty()) return run_engine_dump(c);
  if (!c.dump.empty()) return run_dump(c);
  return run_backend(c);
}

}  // namespace tdiff::app
