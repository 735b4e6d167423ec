// tdiff audit: the precision audit, every knob of the fault catalog at its bad and its good
#include <memory>

#include <fmt/format.h>

#include "app/audit_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_audit(CLI::App& app) {
  auto c = std::make_shared<app::AuditCmd>();
  auto* cmd = app.add_subcommand(
      "audit", "Precision audit: every fault-catalog knob at its bad and its good setting, local and end to end");
  cmd->footer(
      "For each knob: the error of the stages it touches, each run in isolation on the reference's own inputs,\n"
      "with the knob at its bad and at its good setting on top of --policy, and the factor bad/good; a full\n"
      "run at each setting (logits rel_l2, top-1 agreement); and two full runs with different seeds (outputs\n"
      "that differ bit-wise, tokens whose routing differs). Beside each factor the paper's, where it has one: the\n"
      "FlashAttention-on-MI250 port the method came from. --backend hip audits the kernels on the GPU (every knob\n"
      "has emu's meaning there; --hip-gemm vector puts the 16-bit products on the vector ALU). `tdiff info --knobs`\n"
      "and docs/reference/fault-catalog.md explain every knob.\n"
      "Examples:\n"
      "  tdiff audit case.h5\n"
      "  tdiff audit case.h5 --backend hip --knob qk_accum --knob softmax_stats --knob pv_accum --knob logits\n"
      "  tdiff audit case.h5 --policy fixed --set 'L01.attn.core:softmax_stats=fp16' -o reports/audit\n"
      "  tdiff audit case.h5 --knob qk_accum --knob pv_accum --no-full-runs\n"
      "Exit code: 0 done, 2 usage or input error.");
  cmd->add_option("case", c->case_path, "case file with a reference (tdiff golden)")->required();
  add_options(cmd, c->cand);
  cmd->add_option("--seed-b", c->seed_b, "second run seed for the run-to-run column (default: --seed + 1)");
  cmd->add_option("--knob", c->knobs, "audit only these knobs (repeatable; default: the whole catalog)");
  cmd->add_flag("--no-full-runs", c->no_full, "local errors only: no end-to-end or run-to-run columns (faster)");
  cmd->add_option("-o,--out", c->out_dir, "report folder (default reports/<case>/<run-id>)");
  cmd->add_option("--run-id", c->run_id, "run id (default: time-based)");
  cmd->add_flag("--no-reports", c->no_reports, "print the table only; write no report files");
  add_verify_case_option(cmd);
  cmd->callback([c] { exit_code() = app::run_audit_cmd(*c); });
}

}  // namespace tdiff::cli
