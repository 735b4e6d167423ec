#include "app/ci_command.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "app/ci_suite.h"
#include "app/envelope.h"
#include "app/history_command.h"
#include "app/history_record.h"
#include "app/candidate.h"
#include "app/progress.h"
#include "app/shell.h"
#include "casefile/case_file.h"
#include "model/config.h"
#include "base/error.h"
#include "model/pattern.h"
#include "synth/synth.h"
#include "exec/candidate_dump.h"
#include "exec/engine_backend.h"
#include "report/ci_index.h"
#include "report/report.h"
#include "report/summary.h"

namespace fs = std::filesystem;

namespace tdiff::app {

namespace {

// A preset's name as it is, a policy file (*.toml, *.json: Policy::load) by its absolute path,
// so the command runs from any folder.
std::string policy_arg(const std::string& policy) {
  return policy.ends_with(".toml") || policy.ends_with(".json") ? absolute_path(policy) : policy;
}

std::string command_line(const CiCmd& c, const Suite& s) {
  std::string cmd = fmt::format("tdiff ci {}", shell_quote(s.dir));
  if (!c.dumps_dir.empty()) {
    cmd += c.candidate_cmd.empty() ? " --candidate-dumps " + shell_quote(absolute_path(c.dumps_dir))
                                   : " --candidate-cmd " + shell_quote(c.candidate_cmd);
    if (!c.dump_policy.empty()) cmd += " --dump-policy " + shell_quote(policy_arg(c.dump_policy));
  } else {
    cmd += fmt::format(" --backend {} --policy {}", c.backend, shell_quote(policy_arg(c.policy)));
    for (const auto& x : c.sets) cmd += " --set " + shell_quote(x);
  }
  if (c.measured_floor != "on") cmd += " --measured-floor off";
  if (!c.cache_dir.empty()) cmd += " --cache " + shell_quote(absolute_path(c.cache_dir));
  if (!c.thresholds.empty()) cmd += " --thresholds " + shell_quote(absolute_path(c.thresholds));
  for (const auto& o : c.overrides) cmd += " --threshold " + shell_quote(o);
  if (!c.cases.empty()) cmd += " --cases " + shell_quote(c.cases);
  if (c.repeat > 0) cmd += fmt::format(" --repeat {}", c.repeat);
  if (c.backend == "hip" && c.dumps_dir.empty()) cmd += " --hip-gemm " + c.hip_gemm;
  return cmd;
}

// Where the dump of one case is: <dir>/<case>.h5.
std::string dump_file(const CiCmd& c, const SuiteCase& sc) { return c.dumps_dir + "/" + sc.name + ".h5"; }

// The exact `tdiff run` of one case (run 1 of its ci run, or its dump judged).
std::string case_command(const CiCmd& c, const Suite& suite, const SuiteCase& sc, const std::string& case_file,
                         const std::string& thresholds) {
  std::string cmd = fmt::format("tdiff run {}", shell_quote(case_file));
  if (!c.dumps_dir.empty()) {
    cmd += c.candidate_cmd.empty() ? " --candidate-dump " + shell_quote(absolute_path(dump_file(c, sc)))
                                   : " --candidate-cmd " + shell_quote(c.candidate_cmd);
    if (!c.dump_policy.empty()) cmd += " --dump-policy " + shell_quote(policy_arg(c.dump_policy));
  } else {
    cmd += fmt::format(" --backend {} --policy {}", c.backend, shell_quote(policy_arg(c.policy)));
    cmd += suite.replay_selections ? " --selections replay" : " --selections free";
    for (const auto& x : c.sets) cmd += " --set " + shell_quote(x);
    cmd += fmt::format(" --seed {}", sc.seed);
    if (c.backend == "hip") cmd += " --hip-gemm " + c.hip_gemm;
  }
  if (!thresholds.empty()) cmd += " --thresholds " + shell_quote(thresholds);
  for (const auto& o : c.overrides) cmd += " --threshold " + shell_quote(o);
  if (c.measured_floor != "on") cmd += " --measured-floor off";
  return cmd;
}

// Every case asked for has its dump, each dump's names, shapes and dtypes are right, and a dump
// that records its case file (tdiff-capture's do) was written on that case (check_dump_case,
// the rule `tdiff run --candidate-dump` follows: the cases of a set share shapes, so a swapped
// dump would be judged otherwise): checked before any case is judged, so a bad dump stops the
// run before it writes a report.
std::vector<CandidateDump> open_dumps(const CiCmd& c, const std::vector<const SuiteCase*>& cases,
                                      const SuiteCache& cache, const std::vector<std::vector<Stage>>& stages_of_model) {
  std::vector<CandidateDump> dumps;
  for (const SuiteCase* sc : cases)
    dumps.push_back(open_candidate_dump(cache.case_file(*sc), stages_of_model[sc->model], dump_file(c, *sc)));
  return dumps;
}

// --candidate-cmd: the engine run on every case (no stage substituted), its dump <folder>/<case>.h5.
std::string run_engine_on_cases(const CiCmd& c, const std::vector<const SuiteCase*>& cases, const SuiteCache& cache,
                                const EngineFolder& folder) {
  double seconds = 0;
  for (const SuiteCase* sc : cases) {
    EngineRequest r;
    r.case_path = cache.case_file(*sc);
    r.dump_path = folder.path() + "/" + sc->name + ".h5";
    r.seed = sc->seed;
    fmt::print(stderr, "ci: the engine on {}\n", sc->name);
    seconds += run_engine(c.candidate_cmd, r, folder.path() + "/" + sc->name + ".request.json");
  }
  fmt::print(stderr, "ci: the engine ran on {} cases in {:.2f} s\n", cases.size(), seconds);
  return folder.path();
}

void check_dumps_exist(const CiCmd& c, const Suite& suite, const std::vector<const SuiteCase*>& cases) {
  if (std::error_code ec; !fs::is_directory(c.dumps_dir, ec))
    input_error("--candidate-dumps {}: not a folder{}", c.dumps_dir, ec ? " (" + ec.message() + ")" : "");
  std::vector<std::string> missing;
  for (const SuiteCase* sc : cases)
    if (std::error_code ec; !fs::exists(dump_file(c, *sc), ec)) missing.push_back(sc->name + ".h5");
  if (!missing.empty())
    input_error("--candidate-dumps {}: no dump for {} of {} cases ({}); each case's dump is <folder>/<case>.h5, "
                "written on the case file `tdiff ci {} --prepare` lists",
                c.dumps_dir, missing.size(), cases.size(), fmt::join(missing, ", "), suite.dir);
}

// --prepare: one line per case, tab-separated, for a loop that runs an implementation on each.
void print_prepared(const Suite& suite, const SuiteCache& cache, const std::vector<const SuiteCase*>& cases) {
  fmt::print(stderr, "ci {}: models and references ready in {}; per case: name, case file, model folder\n", suite.name,
             cache.dir);
  for (const SuiteCase* sc : cases)
    fmt::print("{}\t{}\t{}\n", sc->name, cache.case_file(*sc), cache.model_dir(suite.model_of(*sc)));
}

// One case's record in the run history (beside the suite's cached case files by default).
void record(const CiCmd& c, const CiCaseResult& r, const EnvRecord& env, const std::string& suite,
            const std::string& report_path) {
  HistoryRecord history(r.case_file, c.history);
  history::RunEntry e = history.entry("ci", r.run_id, env);
  history::add_compare(e, r.diff);
  e.suite = suite;
  e.verdict = verdict_name(r.verdict);  // the runs' agreement included
  e.summary = r.reason;
  e.attrs = {{"deterministic", r.nondeterministic.empty() ? "yes" : r.determinism_note},
             {"repeat", std::to_string(r.runs)}};
  e.timings = {{"case", r.seconds}};
  e.speed = r.speed;
  e.report_path = report_path;
  history.commit(e);
}

// "dumps in DIR (transformers 5.17 (torch 2.9), mode run)": what the dumps say they are.
std::string dumps_description(const CiCmd& c, const std::vector<CandidateDump>& dumps) {
  std::set<std::string> engines, modes;
  for (const auto& d : dumps) {
    const auto e = d.env.find("engine");
    engines.insert(e == d.env.end() ? "engine not recorded" : e->second);
    modes.insert(d.mode);
  }
  return fmt::format("dumps in {} ({}; mode {})", c.dumps_dir, fmt::join(engines, ", "), fmt::join(modes, ", "));
}

// The table row, the reports and the case's record of one judged case.
CiRow finish_case(const CiCmd& c, const Suite& suite, const SuiteCase& sc, CiCaseResult& r, const CiSummary& sum,
                  EnvRecord case_env, const std::string& out, const std::string& thresholds_file) {
  case_env.extra["case"] = sc.name;
  case_env.extra["model"] = suite.model_of(sc).describe();
  case_env.extra["repeat"] = std::to_string(r.runs);
  add_run_facts(case_env, r.case_file, read_case(r.case_file).checksums, sc.seed);

  RunInfo info;
  info.case_name = sc.name;
  info.run_id = r.run_id;
  info.title = fmt::format("tdiff ci {} / {}: {}", suite.name, sc.name, sum.candidate);
  info.command = case_command(c, suite, sc, r.case_file, thresholds_file);
  show_env(case_env, info);
  write_reports(out + "/" + sc.name, r.diff, info);

  CiRow row;
  row.name = sc.name;
  row.about = sc.about;
  row.model = suite.model_of(sc).name;
  row.inputs = fmt::format("{} x {}, {}", r.rows, r.seq, r.padded ? r.pad_side + " padding" : "no padding");
  if (!r.schedule.empty()) row.inputs += ", " + r.schedule;
  row.verdict = r.verdict;
  row.reason = r.reason;
  row.tensors = static_cast<int>(r.diff.rows.size());
  const auto counts = report::count_verdicts(r.diff);
  row.fails = counts.fail, row.warns = counts.warn;
  if (const TensorDiff* lg = logits_row(r.diff)) {
    row.logits_cosine = lg->metrics.cosine;
    row.logits_top1 = lg->logits->top1_agree;
    row.logits_kl_max = lg->logits->kl_max;
  }
  row.runs = r.runs;
  row.deterministic = r.nondeterministic.empty();
  row.seconds = r.seconds;
  row.report = sc.name + "/report.html";
  row.case_file = r.case_file;
  row.run_id = r.run_id;
  if (!row.deterministic) {
    RunInfo dinfo = info;
    dinfo.title = fmt::format("tdiff ci {} / {}: determinism of {}", suite.name, sc.name, sum.candidate);
    dinfo.command = fmt::format("tdiff determinism {} --backend {} --policy {} --seed {} --runs {}{}", shell_quote(r.case_file),
                                c.backend, shell_quote(c.policy), sc.seed, suite.repeat,
                                c.backend == "hip" ? " --hip-gemm " + c.hip_gemm : std::string());
    write_reports(out + "/" + sc.name + "/determinism", r.determinism, dinfo);
    row.determinism_report = sc.name + "/determinism/report.html";
  }
  record(c, r, case_env, suite.name, out + "/" + sc.name);
  return row;
}

// The report folder of one ci run (-o, or reports/ci/<suite>/<run-id>), created when the run
// starts judging. If the run stops on an error (a full disk, a case record that cannot be
// written), what it created is removed again: the folder when it made it, else each case's
// report folder it made; then the parents it made, while empty. Only what this process's own
// mkdir made counts, so a run failing beside another one removes none of the other's folders.
class ReportFolder {
 public:
  ReportFolder(std::string dir, bool given) : dir_(std::move(dir)), given_(given) {
    std::error_code ec;
    made_ = make_folders(dir_, ec);
    if (ec || !fs::is_directory(dir_, ec))
      input_error("{}{}: cannot create the report folder ({})", given ? "-o " : "", dir_,
                  ec ? ec.message() : "not a folder");
    made_dir_ = !made_.empty() && fs::equivalent(made_.back(), dir_, ec);
  }
  ~ReportFolder() {
    if (kept_) return;
    std::error_code ec;
    if (made_dir_) {
      fs::remove_all(made_.back(), ec);
      made_.pop_back();
    } else {
      for (const auto& d : cases_) fs::remove_all(d, ec);
    }
    remove_empty_folders(made_);
  }
  ReportFolder(const ReportFolder&) = delete;
  ReportFolder& operator=(const ReportFolder&) = delete;

  const std::string& dir() const { return dir_; }
  // Called before a case's reports are written into <dir>/<name>: makes that folder.
  void add_case(const std::string& name) {
    const fs::path d = fs::path(dir_) / name;
    std::error_code ec;
    const bool made = fs::create_directory(d, ec);
    if (ec)
      input_error("{}{}: cannot create the case's report folder {} ({})", given_ ? "-o " : "", dir_, d.string(),
                  ec.message());
    if (made && !made_dir_) cases_.push_back(d);
  }
  void keep() { kept_ = true; }

 private:
  std::string dir_;
  bool given_;
  std::vector<fs::path> made_;  // the folders this run made, top first
  bool made_dir_ = false;       // the last of them is the folder itself
  std::vector<fs::path> cases_;
  bool kept_ = false;
};

// The summary's header: what ran, on what, judged how.
CiSummary start_summary(const CiCmd& c, const Suite& suite, const SuiteCache& cache, const Policy& policy,
                        const std::vector<CandidateDump>& dump_files, const std::string& thresholds_file,
                        const EnvRecord& env) {
  CiSummary sum;
  sum.suite = suite.name;
  sum.description = suite.description;
  sum.command = command_line(c, suite);
  sum.candidate = !c.dumps_dir.empty() ? dumps_description(c, dump_files)
                                       : fmt::format("{} under {}", c.backend, policy.describe());
  sum.cache = cache.built ? fmt::format("models and references built into {} (for this run: {})", cache.dir,
                                        fmt::join(cache.built_parts, ", "))
                          : fmt::format("models and references reused from {}", cache.dir);
  sum.thresholds_file = thresholds_file;
  sum.thresholds_text = thresholds_file.empty() ? "(none: the default thresholds)" : read_text_file(thresholds_file);
  for (const auto& o : c.overrides) sum.thresholds_text += "\n# --threshold " + o;
  for (const auto& [k, v] : env.to_attrs()) sum.env.emplace_back(k, v);
  return sum;
}

// Each model's stages into `per_model`; every stage name once (models of one preset share them).
std::vector<Stage> stages_of_models(const Suite& suite, std::vector<std::vector<Stage>>& per_model) {
  std::vector<Stage> stages;
  std::set<std::string> named;
  for (const SuiteModel& m : suite.models) {
    per_model.push_back(build_stages(m.config()));
    for (const Stage& s : per_model.back())
      if (named.insert(s.name).second) stages.push_back(s);
  }
  return stages;
}

// --gate: this run's records (the newest in the history of the set's cache, `cache_root`) held
// to the baseline's, case by case, as `tdiff gate` holds them; 0 without --gate.
int gate_after(const CiCmd& c, const std::string& cache_root) {
  if (c.gate_baseline.empty() || c.history.no_record) return 0;
  GateCmd gate;
  gate.target = cache_root;
  gate.history = c.history.history;
  gate.gate.baseline = c.gate_baseline;
  gate.gate.speed = c.gate_speed;
  fmt::print("\n");
  return run_gate(gate);
}

}  // namespace

int run_ci(CiCmd c) {
  Suite suite = load_suite(c.suite);
  if (c.repeat > 0) suite.repeat = c.repeat;
  const bool engine = !c.candidate_cmd.empty();
  const bool dumps = !c.dumps_dir.empty() || engine;
  if (!c.dump_policy.empty() && !dumps) input_error("--dump-policy needs --candidate-dumps or --candidate-cmd");
  Policy policy = Policy::load(c.policy);
  for (const auto& s : c.sets) policy.add_set(s);
  std::optional<Policy> dump_policy;
  if (!c.dump_policy.empty()) dump_policy = Policy::load(c.dump_policy);
  const std::string thresholds_file = !c.thresholds.empty() ? absolute_path(c.thresholds) : suite.thresholds_file;
  ThresholdPolicy thresholds = thresholds_file.empty() ? ThresholdPolicy{} : load_thresholds(thresholds_file);
  for (const auto& o : c.overrides) add_threshold_override(thresholds, o);
  // Each model's stages, and every stage name once (models of one preset share them): a knob or
  // a threshold pattern must apply to some model's.
  std::vector<std::vector<Stage>> stages_of_model;
  const std::vector<Stage> stages = stages_of_models(suite, stages_of_model);
  (dumps && dump_policy ? *dump_policy : policy).validate(stages);  // a knob that applies nowhere: an input error before any build
  {
    std::vector<std::string> keys;
    for (const auto& s : stages)
      for (const auto& t : s.outputs) keys.push_back(s.name + "/" + t);
    thresholds.check_patterns(keys);
  }
  std::vector<const SuiteCase*> cases;
  for (const auto& sc : suite.cases)
    if (pattern_matches(c.cases, sc.name)) cases.push_back(&sc);
  if (cases.empty()) input_error("{}: --cases '{}' matches no case", suite.dir, c.cases);
  if (dumps && !engine)
    check_dumps_exist(c, suite, cases);
  else if (!c.prepare)
    make_candidate(c.backend, policy, 0, c.hip_gemm);  // a backend this build lacks: an input error before any work

  const std::string run_id = app::run_id_for(c.run_id, "ci");  // checked before the cache is built
  const std::string out = c.out_dir.empty() ? fmt::format("reports/ci/{}/{}", suite.name, run_id) : c.out_dir;
  std::optional<ReportFolder> folder;  // made before the cache is built: an -o that cannot be made fails first
  if (!c.prepare) folder.emplace(out, !c.out_dir.empty());

  const auto t0 = std::chrono::steady_clock::now();
  const SuiteCache cache = prepare_suite_cache(suite, c.cache_dir, c.rebuild, [](const std::string& what) {
    fmt::print(stderr, "ci: building {}\n", what);
  }, cases);
  if (c.prepare) {
    print_prepared(suite, cache, cases);
    return 0;
  }
  // The history in the cache's root (history::history_path_for: one over every version of the
  // set), opened before the runs: one that cannot be written fails now.
  if (!c.history.no_record && !cases.empty()) HistoryRecord(cache.case_file(*cases.front()), c.history);
  std::optional<EngineFolder> engine_dumps;  // --candidate-cmd: the engine's <case>.h5, made now
  if (engine) c.dumps_dir = run_engine_on_cases(c, cases, cache, engine_dumps.emplace());
  const std::vector<CandidateDump> dump_files =
      dumps ? open_dumps(c, cases, cache, stages_of_model) : std::vector<CandidateDump>{};

  CiOptions opt;
  opt.make = [&](std::uint64_t seed) { return make_candidate(c.backend, policy, seed, c.hip_gemm); };
  opt.policy = policy;
  opt.thresholds = thresholds;
  opt.measured_floor = c.measured_floor == "on";
  opt.timed = c.timed;
  EnvRecord env = dumps ? capture_env("dump", c.dump_policy.empty() ? "none (scaled rule)" : c.dump_policy, process_command_line())
                        : candidate_env(c.backend, policy, stages, nullptr, c.hip_gemm);
  env.extra["suite"] = suite.name;
  env.extra["suite_hash"] = suite.hash;
  CiSummary sum = start_summary(c, suite, cache, policy, dump_files, thresholds_file, env);

  for (std::size_t i = 0; i < cases.size(); ++i) {
    const SuiteCase& sc = *cases[i];
    const std::string case_file = cache.case_file(sc);
    Progress progress(fmt::format("ci {}", sc.name), 0);
    opt.progress = [&](const Stage& s, std::size_t k, int run) { progress.step(k + 1, fmt::format("run {}: {}", run, s.name)); };
    CiCaseResult r = dumps ? judge_ci_dump(sc, case_file, dump_files[i], dump_policy ? &*dump_policy : nullptr, thresholds,
                                         opt.measured_floor)
                           : run_ci_case(suite, sc, case_file, opt);
    r.run_id = run_id;
    progress.finish(fmt::format("ci {}: {} in {:.1f} s", sc.name, verdict_name(r.verdict), r.seconds));
    EnvRecord case_env = env;
    if (dumps) {
      case_env.extra["dump"] = absolute_path(dump_files[i].path);
      case_env.extra["dump_mode"] = dump_files[i].mode;
      for (const auto& [k, v] : dump_files[i].env) case_env.extra["dump." + k] = v;
    }
    folder->add_case(sc.name);
    sum.rows.push_back(finish_case(c, suite, sc, r, sum, case_env, out, thresholds_file));
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic(out + "/junit.xml", render_ci_junit(sum));
  write_file_atomic(out + "/index.html", render_ci_index(sum));
  folder->keep();
  fmt::print("{}", render_ci_table(sum, want_color(stdout)));
  fmt::print("cache       {}\n", sum.cache);
  fmt::print("reproduce   {}\n", sum.command);
  fmt::print("reports     {}/index.html (and junit.xml, <case>/report.html)\n", out);
  return std::max(sum.verdict() == Verdict::fail ? 1 : 0, gate_after(c, fs::path(cache.dir).parent_path().string()));
}

}  // namespace tdiff::app
