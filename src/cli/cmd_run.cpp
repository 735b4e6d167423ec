// tdiff run: the candidate on the case's inputs, every stage compared with /reference.
#include <memory>

#include <fmt/format.h>

#include "app/run_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_run(CLI::App& app) {
  auto c = std::make_shared<app::RunCmd>();
  auto* cmd = app.add_subcommand("run", "Run the candidate on the case's inputs and compare every stage with the reference");
  cmd->footer(
      "Examples:\n"
      "  tdiff run case.h5                                   # emu backend, fixed policy\n"
      "  tdiff run case.h5 --policy naive\n"
      "  tdiff run case.h5 --set 'L02.attn.core:softmax_stats=fp16' --threshold 'cosine_fail=0.999'\n"
      "  tdiff run case.h5 --candidate-dump hf-bf16.h5          # an external implementation's dump as the candidate\n"
      "  tdiff run case.h5 --save --run-id r1 && tdiff compare case.h5 case.h5 --group-a /reference --group-b /runs/r1\n"
      "  tdiff run case.h5 --backend hip --timed 5 --label my-branch   # speed and accuracy into the run history\n"
      "Exit code: 0 all stages pass (warnings allowed), 1 a stage fails, 2 usage or input error.");
  cmd->add_option("case", c->case_path, "case file with a reference (tdiff golden)")->required();
  cmd->add_option("--stages", c->stages, "compare only stages matching these globs (all stages still run)");
  auto* selections = cmd->add_option("--selections", c->selections,
                  "replay: later stages get the reference's expert and indexer choices, so each stage is judged on "
                  "the same choices and only top-k faults fail a selection; free: the candidate follows its own, and "
                  "is judged against the reference that follows the same choices (one more reference forward from "
                  "the first flip on). With --candidate-cmd: the engine is asked for a dump in that mode "
                  "(default free)")
      ->check(CLI::IsMember({"replay", "free"}))
      ->capture_default_str();
  auto* save = cmd->add_flag("--save", c->save,
                             "keep the candidate's tensors (of the --stages compared) under /runs/<run-id> of the case, for "
                             "tdiff compare");
  // One file the tensors go to: each is written under its own lock, and two runs holding one
  // lock while waiting for the other's would wait forever.
  cmd->add_option("--save-to", c->save_to, "keep them under /runs/<run-id> of this HDF5 file instead (created or added to)")
      ->excludes(save);
  cmd->add_flag("--stats", c->stats,
                "also write the model statistics of report.html's section (tdiff stats) as stats.csv and stats.json");
  add_options(cmd, c->cand);
  cmd->add_flag("--as-prefill", c->as_prefill,
                "a generation case (case new --decode) as one prefill of the whole sequence; without it emu and refcpu "
                "run its schedule, the prompt's chunks and then one decode step per token, against a cache laid out as "
                "engines lay it out (docs/guide/generation.md)");
  cmd->add_flag("--p-vs-d", c->p_vs_d,
                "a generation case: also run the candidate's schedule in steps against its own prefill of the same "
                "tokens (its own selections, no reference) and report how its logits differ (SGLang's p_vs_d check)");
  auto* dump = cmd->add_option("--candidate-dump", c->dump,
                               "judge this dump (python/ capture, the tap of src/tap/tap.h) instead of running a backend")
                   ->check(CLI::ExistingFile);
  auto* engine = cmd->add_option("--candidate-cmd", c->cand.candidate_cmd,
                                 "run your engine and judge its dump: a shell command tdiff runs once, with the request "
                                 "file in $TDIFF_REQUEST (docs/reference/engine-protocol.md)")
                     ->excludes(dump);
  cmd->add_option("--dump-group", c->dump_group, "the dump's group holding <stage>/<tensor> datasets (default /)")
      ->needs(dump);
  cmd->add_option("--dump-policy", c->dump_policy,
                  "the formats the dump's implementation stores in (a preset such as fixed for a bf16 port, or a policy "
                  "file): its expected errors, as a backend's policy gives them");
  for (const char* name :
       {"--backend", "--policy", "--set", "--seed", "--hip-gemm", "--selections", "--save", "--save-to", "--stats", "--tp",
        "--ep", "--p-vs-d", "--as-prefill"})
    if (auto* o = cmd->get_option_no_throw(name)) {
      dump->excludes(o);
      if (o != selections) engine->excludes(o);
    }
  cmd->add_option("--measured-floor", c->measured_floor,
                  "on: also run emu in the candidate's storage and stream formats (every other knob correct) and hold "
                  "each tensor to both rules, the a-priori expected error and the ratio to that floor (a dump: with "
                  "--dump-policy); off: the a-priori rule alone (docs/design/tolerance-model.md)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  add_options(cmd, c->report);
  add_options(cmd, c->weights);
  add_options(cmd, c->history);
  cmd->add_option("--timed", c->timed,
                  "after the compared run, time N forwards of the candidate alone and one profiled per stage class; "
                  "their logits are hashed and matched with the compared run's, so the speed recorded is the speed "
                  "of what was judged (`tdiff history`, `tdiff gate`)")
      ->check(CLI::Range(0, 1000));
  add_verify_case_option(cmd);
  cmd->callback([c, selections] {
    c->selections_given = selections->count() > 0;
    exit_code() = app::run_run(*c);
  });
}

}  // namespace tdiff::cli
