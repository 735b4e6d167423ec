// tdiff run: the candidate on the case's inputs, every stage compared with /reference.
#include <filesystem>

#include <fmt/format.h>

#include "exec/mixed_run.h"
#include "cli/candidate.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "cli/report_options.h"
#include "cli/shell.h"
#include "core/env_record.h"
#include "core/error.h"
#include "emu/arith.h"
#include "refcpu/refcpu_backend.h"
#include "report/summary.h"

namespace tdiff::cli {

namespace {

struct RunCmd {
  std::string case_path;
  std::string stages;
  std::string selections = "replay";
  CandidateOptions cand;
  ReportOptions report;
};

// Keys of every stage output, for checking threshold patterns.
std::vector<std::string> output_keys(const std::vector<Stage>& stages) {
  std::vector<std::string> keys;
  for (const auto& s : stages)
    for (const auto& t : s.outputs) keys.push_back(s.name + "/" + t);
  return keys;
}

std::uint64_t seed_from(const std::string& run_id) {
  std::uint64_t h = 0;
  for (unsigned char ch : run_id) h = arith::mix64(h ^ ch);
  return h;
}

void run_run(RunCmd c) {
  CaseSession session = open_session(c.case_path, c.cand.model_dir);
  if (reference_stages(c.case_path).empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  const Policy policy = c.cand.make_policy(session);
  const ThresholdPolicy thresholds = c.report.make_thresholds(output_keys(session.stages));
  const std::string run_id = c.report.run_id.empty() ? make_run_id("run") : c.report.run_id;
  if (c.cand.seed == 0) c.cand.seed = seed_from(run_id);
  auto candidate = make_candidate(c.cand.backend, policy, c.cand.seed, c.cand.hip_gemm);
  refcpu::RefCpuBackend reference;

  Progress progress(fmt::format("run {}", c.cand.backend), session.stages.size());
  MixedRunOptions mo;
  mo.compare = c.stages;
  mo.replay_selections = c.selections == "replay";
  mo.progress = [&](const Stage& s, std::size_t i) { progress.step(i + 1, s.name); };
  RunContext ctx = session.context();
  const std::vector<bool> all(session.stages.size(), true);
  MixedRunResult r = run_mixed(session, *candidate, reference, all, ctx, mo);
  progress.finish(fmt::format("run: {} stages on {} in {:.2f} s", r.on_candidate, c.cand.backend, r.seconds));
  if (mo.replay_selections && !r.not_replayed.empty())
    fmt::print("selections: {} of {} selection stages not replayed (no stored reference: {}{}); later stages follow the "
               "candidate's own choices there\n",
               r.not_replayed.size(), r.not_replayed.size() + r.replayed, r.not_replayed.front(),
               r.not_replayed.size() > 1 ? ", ..." : "");
  judge(r.diff, thresholds);

  RunInfo info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff run {}: {} under {}{}", std::filesystem::path(c.case_path).filename().string(),
                           c.cand.backend, policy.describe(),
                           r.replayed ? ", selections replayed from the reference" : "");
  info.command = fmt::format("tdiff run {}{}{}", shell_quote(absolute_path(c.case_path)), c.cand.flags(), c.report.flags()) +
                 (c.stages.empty() ? "" : " --stages " + shell_quote(c.stages)) + " --selections " + c.selections +
                 " --run-id " + shell_quote(run_id);
  EnvRecord env = capture_env(c.cand.backend, policy.describe(), process_command_line());
  env.extra["seed"] = std::to_string(c.cand.seed);
  for (const auto& [k, v] : candidate->environment()) env.extra[k] = v;
  for (const auto& [k, v] : env.to_attrs()) info.env.emplace_back(k, v);
  c.report.emit(r.diff, info);

  if (r.diff.first_fail >= 0) {
    const TensorDiff& d = r.diff.rows[static_cast<std::size_t>(r.diff.first_fail)];
    // Integer selections: agreement only (a distance between expert ids means nothing).
    const std::string numbers =
        d.kind == TensorKind::routing || d.kind == TensorKind::exact
            ? report::error_text(d)
            : fmt::format("cosine {:.6f}, rel_l2 {:.3g}, expected {}", d.metrics.cosine, d.metrics.rel_l2,
                          report::expected_text(d));
    const std::string where = report::where_text(r.diff, d);
    fmt::print("first divergence: {} ({}): {}{}\n", d.key(), numbers, d.reason, where.empty() ? "" : "; at " + where);
  } else {
    fmt::print("first divergence: none (no stage fails its thresholds)\n");
  }

  // The run's record in the case: environment and verdict summary.
  CaseUpdate update(c.case_path);
  update.put_env(run_id, env);
  const std::string g = "/runs/" + run_id;
  update.writer().set_attr(g, "backend", c.cand.backend);
  update.writer().set_attr(g, "policy", policy.describe());
  update.writer().set_attr(g, "selections", c.selections);
  update.writer().set_attr(g, "verdict", verdict_name(r.diff.verdict));
  update.writer().set_attr(g, "first_divergence", r.diff.first_fail >= 0 ? r.diff.rows[static_cast<std::size_t>(r.diff.first_fail)].key() : "");
  update.writer().set_attr(g, "report_csv", render_csv(r.diff));
  update.commit();
  exit_code() = r.diff.verdict == Verdict::fail ? 1 : 0;
}

}  // namespace

void setup_run(CLI::App& app) {
  auto c = std::make_shared<RunCmd>();
  auto* cmd = app.add_subcommand("run", "Run the candidate on the case's inputs and compare every stage with the reference");
  cmd->footer(
      "Examples:\n"
      "  tdiff run case.h5                                   # emu backend, fixed policy\n"
      "  tdiff run case.h5 --policy naive\n"
      "  tdiff run case.h5 --set 'L02.attn.core:softmax_stats=fp16' --threshold 'cosine_fail=0.999'\n"
      "Exit code: 0 all stages pass (warnings allowed), 1 a stage fails, 2 usage or input error.");
  cmd->add_option("case", c->case_path, "case file with a reference (tdiff golden)")->required();
  cmd->add_option("--stages", c->stages, "compare only stages matching these globs (all stages still run)");
  cmd->add_option("--selections", c->selections,
                  "replay: later stages get the reference's expert and indexer choices, so each stage is judged on "
                  "the same choices and only top-k faults fail a selection; free: the candidate follows its own")
      ->check(CLI::IsMember({"replay", "free"}))
      ->capture_default_str();
  c->cand.add_to(cmd);
  c->report.add_to(cmd);
  cmd->callback([c] { run_run(*c); });
}

}  // namespace tdiff::cli
