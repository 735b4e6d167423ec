// tdiff golden: the float64 reference of every stage into /reference of the case file.
#include <chrono>

#include "cli/command.h"
#include "cli/progress.h"
#include "core/env_record.h"
#include "core/error.h"
#include "core/executor.h"
#include "core/pattern.h"
#include "core/session.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::cli {

namespace {

struct GoldenOptions {
  std::string case_path;
  std::string model_dir;
  std::string stages;
  std::string tie_rule = "lowest-index";
};

void run_golden(const GoldenOptions& o) {
  CaseSession session = open_session(o.case_path, o.model_dir);
  if (!o.stages.empty()) select_stages(o.stages, session.stages);  // an unknown pattern is an input error
  RunContext ctx = session.context(parse_tie_rule(o.tie_rule));
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(session.info.batch, env);

  CaseUpdate update(o.case_path);
  update.clear_reference();
  Progress progress("golden", session.stages.size());
  std::size_t stored = 0;
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    progress.step(i + 1, s.name);
    if (!pattern_matches(o.stages, s.name)) return;
    for (std::size_t k = 0; k < out.size(); ++k, ++stored) update.put_reference(s.name, s.outputs[k], out[k]);
  };
  const auto t0 = std::chrono::steady_clock::now();
  execute(session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string run_id = make_run_id("golden");
  EnvRecord rec = capture_env("refcpu", "float64", process_command_line());
  rec.extra["tie_rule"] = o.tie_rule;
  rec.extra["stages"] = o.stages.empty() ? "*" : o.stages;
  update.put_env(run_id, rec);
  update.writer().set_attr("/reference", "tie_rule", o.tie_rule);
  update.writer().set_attr("/reference", "env", run_id);
  update.commit();
  progress.finish(fmt::format("golden: {} stages computed in {:.2f} s, {} tensors stored under /reference of {}",
                              session.stages.size(), secs, stored, o.case_path));
}

}  // namespace

void setup_golden(CLI::App& app) {
  auto o = std::make_shared<GoldenOptions>();
  auto* cmd = app.add_subcommand("golden", "Run the float64 reference and store every stage's output in the case");
  cmd->footer(
      "Example:\n"
      "  tdiff golden case.h5\n"
      "  tdiff golden case.h5 --stages 'L0[2-4].attn.*,lm_head'\n"
      "  tdiff golden case.h5 --tie-rule torch-cpu   # break top-k ties as torch does on the CPU");
  cmd->add_option("case", o->case_path, "case file (tdiff case new)")->required();
  cmd->add_option("--model", o->model_dir, "model folder (default: the path the case records)");
  cmd->add_option("--stages", o->stages, "store only stages matching these globs (comma-separated)");
  cmd->add_option("--tie-rule", o->tie_rule, "top-k tie rule: lowest-index (default) or torch-cpu")
      ->check(CLI::IsMember({"lowest-index", "torch-cpu"}));
  cmd->callback([o] { run_golden(*o); });
}

}  // namespace tdiff::cli
