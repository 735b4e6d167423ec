// tdiff golden: the float64 reference of every stage into /reference of the case file.
#include <memory>

#include <fmt/format.h>

#include "app/golden_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_golden(CLI::App& app) {
  auto o = std::make_shared<app::GoldenOptions>();
  auto* cmd = app.add_subcommand(
      "golden", "Run the float64 reference and store its outputs in the case: every stage, or the layer boundaries");
  cmd->footer(
      "--store boundaries keeps a reference small: V4-Flash's 43 layers at 4096 tokens take 28.9 GB instead of 361 GB\n"
      "(bench/refcpu/reference_size). Commands read every stage of it as of a full one: a stage it lacks is recomputed\n"
      "with its layer from the stored boundary on refcpu, bit-identical, which needs the model folder (--model DIR);\n"
      "each layer once while its outputs fit TDIFF_REF_CACHE_GB (default 4; a real-width layer at 4096 tokens is 8-9 GB).\n"
      "Example:\n"
      "  tdiff golden case.h5\n"
      "  tdiff golden case.h5 --stages 'L0[2-4].attn.*,lm_head'   # the other stored stages stay\n"
      "  tdiff golden case.h5 --store boundaries   # a few stages per layer; the rest recomputed when read\n"
      "  tdiff golden case.h5 --store boundaries --stages 'L02.*'   # and every stage of layer 2\n"
      "  tdiff golden case.h5 --tie-rule torch-cpu   # break top-k ties as torch does on the CPU\n"
      "  tdiff golden case.h5 --verify   # a reference made elsewhere: each stage's own difference from this build");
  cmd->add_option("case", o->case_path, "case file (tdiff case new)")->required();
  cmd->add_option("--model", o->model_dir, "model folder (default: the path the case records)");
  cmd->add_option("--stages", o->stages,
                  "recompute only stages matching these globs (comma-separated); the other stored stages are kept. "
                  "With --store boundaries: stages stored besides the boundaries");
  cmd->add_option("--store", o->store,
                  "all (default): every stage's outputs; boundaries: the residual stream at every layer boundary, "
                  "the stages outside the layers (embedding, RoPE tables, masks, final.*, lm_head) and the "
                  "selections, plus --stages: reading another stage recomputes its layer from the stored boundary "
                  "with the model (bit-identical; /reference is rewritten whole)")
      ->check(CLI::IsMember({"all", "boundaries"}));
  cmd->add_option("--tie-rule", o->tie_rule, "top-k tie rule: lowest-index (default) or torch-cpu")
      ->check(CLI::IsMember({"lowest-index", "torch-cpu"}));
  cmd->add_flag("--verify", o->verify,
                 "recompute every stage from the stored reference's inputs and report how far this build is from it "
                 "(the case is not changed; exit 1 beyond --tolerance)");
  cmd->add_option("--conditioning-probes", o->conditioning_probes,
                  "probes of each stage's conditioning stored beside the reference, which the expected errors are "
                  "amplified by (docs/design/tolerance-model.md; 0: none, every stage taken as well conditioned)")
      ->check(CLI::Range(0, 64));
  add_options(cmd, o->weights);
  cmd->get_option("--force")->description(
      "go on when the model's weight files differ from what the case records, and let --stages drop the stored "
      "stages it does not recompute where they cannot be kept (another tie rule, other weights)");
  cmd->add_option("--tolerance", o->tolerance, "--verify: largest relative L2 of a float tensor (default 1e-12)")
      ->check(CLI::PositiveNumber);
  add_verify_case_option(cmd);
  cmd->callback([o] {
    exit_code() = o->verify ? app::verify_golden(*o) : app::run_golden(*o);
  });
}

}  // namespace tdiff::cli
