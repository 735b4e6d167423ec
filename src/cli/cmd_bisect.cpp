// tdiff bisect: which candidate stage makes the watched output fail (bisect/bisect.h).
#include <memory>

#include <fmt/format.h>

#include "app/bisect_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_bisect(CLI::App& app) {
  auto c = std::make_shared<app::BisectCmd>();
  auto* cmd = app.add_subcommand("bisect", "Find the candidate stage(s) that make the watched output fail");
  cmd->footer(
      "Examples:\n"
      "  tdiff bisect case.h5 --policy fp32 --floor fp32 --set 'L02.attn.core:qk_accum=fp16'   # names L02.attn.core\n"
      "  tdiff bisect case.h5 --set 'L02.attn.core:qk_accum=fp16'   # on fixed, random weights: inconclusive, ranks it first\n"
      "  tdiff bisect trained.h5 --set 'L00.hc_attn.mix:sinkhorn=fp16'   # synth --profile trained: inconclusive, lead 1 FAILs\n"
      "  tdiff bisect case.h5 --policy naive --attribute                 # culprits and the error share per operator class\n"
      "  tdiff bisect case.h5 --policy naive --mode isolate              # every stage on the reference's inputs, ranked\n"
      "  tdiff bisect case.h5 --policy fp32 --set 'L01.moe.router:router=bf16' --watch L02.moe.select/idx --floor none\n"
      "  tdiff bisect big.h5 --backend hip --set 'L01.attn.core:pv_accum=fp16' --suffix reference   # exact suffix, slower\n"
      "  tdiff bisect case.h5 --candidate-cmd 'build/tap_emu --request fault.toml'   # your engine, run by tdiff\n"
      "Search: stages 1..k on the candidate and the rest on the reference (--suffix reference) or on the floor\n"
      "(--suffix floor: the floor policy's own kernels, each split then one forward; auto, the default, takes the\n"
      "floor on hip and the reference elsewhere); the smallest k that makes the watched output FAIL names the first\n"
      "culprit; pinning culprits to the same and searching again gives the culprit set. The watched output FAILs when its error exceeds floor_k (--threshold floor_k=3) times the error of the\n"
      "floor run (--floor, default the fixed policy on the same backend), in rmse; a threshold\n"
      "that floor_k x the floor's error would cross is off (1 - cosine and KL: floor_k^2).\n"
      "Inconclusive (no split fails): every stage is isolated on the reference's inputs, and the five that deviate most\n"
      "from the floor are listed with the command to run next. Progress goes to stderr, the trace to stdout as it runs.\n"
      "Exit code: 0 nothing crosses the threshold, 1 a culprit found (isolate: a stage fails), 2 usage or input error.");
  cmd->add_option("case", c->case_path, "case file with a reference (tdiff golden)")->required();
  add_options(cmd, c->cand);
  add_candidate_cmd_option(cmd, c->cand);
  cmd->add_option("--watch", c->watch, "watched output: logits (default), STAGE or STAGE/tensor");
  cmd->add_option("--floor", c->floor, "noise-floor policy on the same backend (preset or file), or none (default fixed)");
  cmd->add_option("--mode", c->mode, "search (default): mixed runs; isolate: each stage on the reference's inputs")
      ->check(CLI::IsMember({"search", "isolate"}));
  cmd->add_option("--suffix", c->suffix,
                  "what runs the stages after a split: reference (float64, exact), floor (the floor policy on the "
                  "candidate's backend: fast on a GPU), auto (default: floor on hip, else reference)")
      ->check(CLI::IsMember({"auto", "reference", "floor"}));
  cmd->add_flag("--attribute", c->attribute, "also swap each operator class alone and report its share of the error");
  cmd->add_option("--attribute-by", c->attribute_by, "group stages by class (stage_class, default) or kind (operator kind)")
      ->check(CLI::IsMember({"class", "kind"}));
  cmd->add_option("--max-culprits", c->max_culprits, "stop the culprit set after this many stages (default 8)")
      ->check(CLI::PositiveNumber);
  add_options(cmd, c->report);
  add_options(cmd, c->history);
  add_verify_case_option(cmd);
  cmd->callback([c] { exit_code() = app::run_bisect(*c); });
}

}  // namespace tdiff::cli
