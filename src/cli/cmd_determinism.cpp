// tdiff determinism: is the backend bit-for-bit reproducible, run to run and across batches?
#include <memory>

#include <fmt/format.h>

#include "app/determinism_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_determinism(CLI::App& app) {
  auto c = std::make_shared<app::DeterminismCmd>();
  auto* cmd = app.add_subcommand("determinism", "Check that a backend reproduces every stage bit for bit: run to run, "
                                                "across thread counts, and across batch sizes");
  cmd->footer(
      "Examples:\n"
      "  tdiff determinism case.h5 --backend emu --policy naive --runs 3     # atomics and unstable ties: caught\n"
      "  tdiff determinism case.h5 --backend emu --policy fixed --runs 3\n"
      "  tdiff determinism case.h5 --backend refcpu --runs 3 --threads 1,2,4\n"
      "  tdiff determinism case.h5 --backend emu --batch-sweep 1,2,4,8 --pad-side both\n"
      "  tdiff determinism small.h5 --tp-sweep 1,2,4 --orders ring,tree,custom1   # splits against the reference\n"
      "  tdiff determinism case.h5 --tp 2 --allreduce tree --runs 3             # a pinned order, run to run\n"
      "  tdiff determinism case.h5 --backend hip --runs 5 --on-device   # compared on the GPU: no tensor copied unless it differs\n"
      "Run k uses run seed SEED+k-1 (emu: the order of atomic reductions and unstable ties).\n"
      "--backend hip needs a tdiff built with -DTDIFF_HIP=AMD or NVIDIA and a GPU.\n"
      "Exit code: 0 bit-identical everywhere, 1 something differed, 2 usage or input error.");
  cmd->add_option("case", c->case_path, "case file (tdiff case new)")->required();
  add_backend_option(cmd, c->cand.backend, true);
  cmd->add_option("--policy", c->cand.policy, "numerics policy of emu/hip: naive, fixed, fp32, or a policy file")
      ->capture_default_str();
  cmd->add_option("--set", c->cand.sets, "override a knob: 'PATTERN:knob=value' (repeatable)");
  add_split_options(cmd, c->cand.sets);
  cmd->add_option_function<std::uint64_t>("--seed", [c](std::uint64_t s) { c->cand.seed = s, c->seed_given = true; },
                                          "run seed of run 1 (default: from the run id)");
  cmd->add_option("--model", c->cand.model_dir, "model folder (default: the path the case records)");
  cmd->add_option("--candidate-cmd", c->cand.candidate_cmd,
                  "your engine instead of a backend: a shell command tdiff runs once per run (the request file in "
                  "$TDIFF_REQUEST: docs/reference/engine-protocol.md); its dumps are compared bit for bit")
      ->excludes(cmd->get_option("--backend"));
  cmd->add_option("--runs", c->runs, "number of runs (at least 2)")->capture_default_str();
  cmd->add_option("--threads", c->threads, "OpenMP thread counts cycled over the runs (refcpu default 1,2,4)")
      ->delimiter(',');
  cmd->add_option("--batch-sweep", c->batch_sweep,
                  "batch sizes: each prompt alone and inside batches of the others, at every row")
      ->delimiter(',');
  cmd->add_option("--tp-sweep", c->tp_sweep,
                  "tensor-parallel sizes (emu): each split and --orders order against the float64 reference and the "
                  "unsplit run, a vacuity check (needs 4+ ranks) and a repeat of every pinned order")
      ->delimiter(',');
  cmd->add_option("--orders", c->orders, "all-reduce orders of --tp-sweep (ring, tree, fixed, custom1, custom2)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--pad-side", c->pad_side, "padding of the sweep's batches: left, right or both (default: the case's)")
      ->check(CLI::IsMember({"left", "right", "both"}));
  cmd->add_option("--stages", c->stages, "report only stages matching these globs (all stages still run)");
  cmd->add_option("-o,--out", c->out_dir, "report folder (default reports/<case>/<run-id>)");
  cmd->add_option("--run-id", c->run_id, "run id (default: time-based)");
  cmd->add_flag("--on-device", c->on_device,
                "hip: keep run 1's outputs on the GPU and compare each later run there; only the comparison and "
                "the tensors that differ are copied to the host");
  cmd->add_flag("--all", c->all_rows, "list every differing tensor, not only the origins and the first 30");
  cmd->add_flag("--no-reports", c->no_reports, "print only; write no report files (the run history still records the run)");
  add_options(cmd, c->history);
  add_verify_case_option(cmd);
  cmd->callback([c] { exit_code() = app::run_determinism(*c); });
}

}  // namespace tdiff::cli
