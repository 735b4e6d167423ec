// tdiff compare: diff any two HDF5 dumps whose dataset names match, with verdicts and reports.
#include <memory>

#include <fmt/format.h>

#include "app/compare_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_compare(CLI::App& app) {
  auto c = std::make_shared<app::CompareCmd>();
  auto* sub = app.add_subcommand("compare", "Diff two HDF5 dumps tensor by tensor; verdicts and reports");
  sub->footer(
      "Datasets are paired by their path under each group (\"<stage>/<tensor>\"); those on one side only are\n"
      "listed; a pair of other shapes (beyond size-1 dimensions) is one FAIL row. /runs/<run-id> holds the\n"
      "candidate's tensors of `tdiff run --save --run-id <run-id>`; against its case they are paired stage by\n"
      "stage and judged as that run judged them (its policy, selection mode and routing bias).\n"
      "Exit code: 0 all pass (warnings allowed), 1 any FAIL, 2 usage or input error.\n\n"
      "Examples:\n"
      "  tdiff compare case.h5 dump.h5                       # case /reference vs the dump's root\n"
      "  tdiff compare a.h5 b.h5 --group-a /reference --group-b /runs/r1 --stages 'L0[2-4].attn.*'\n"
      "  tdiff compare case.h5 fp16.h5 --floor fp32.h5 --floor-k 3 -o out/\n"
      "  tdiff compare case.h5 dump.h5 --thresholds th.toml --threshold 'lm_head:max_abs_fail=0.5'");
  sub->add_option("A", c->file_a, "reference dump (HDF5)")->required();
  sub->add_option("B", c->file_b, "candidate dump (HDF5)")->required();
  sub->add_option("--group-a", c->group_a, "group of A to compare (default: /reference if present, else /)");
  sub->add_option("--group-b", c->group_b, "group of B to compare (default: /reference if present, else /)");
  sub->add_option("--stages", c->stages, "only stages matching this glob, e.g. 'L0[2-4].attn.*'");
  sub->add_option("--thresholds", c->thresholds, "thresholds file (TOML: [default] and [[rule]] stages = glob)");
  sub->add_option("--threshold", c->overrides, "override 'KEY=VALUE' or 'GLOB:KEY=VALUE[,KEY=VALUE]' (repeatable)");
  sub->add_option("--floor", c->floor_file, "noise-floor dump: FAIL where B's rmse exceeds k x the floor's");
  sub->add_option("--group-floor", c->floor_group, "group of the noise-floor dump");
  sub->add_option("--floor-k", c->floor_k, "noise-floor factor k (default 3)");
  sub->add_option("--rel-floor", c->rel_floor, "denominator floor of max_rel (default 1e-3)");
  sub->add_option("-o,--out", c->out_dir, "report folder (default reports/<case>/<run-id>)");
  sub->add_option("--case", c->case_name, "case name for the report folder (default: A's file name)");
  sub->add_option("--run-id", c->run_id, "run id for the report folder (default: time-based)");
  sub->add_flag("--all", c->all_rows, "print every tensor, not only WARN/FAIL, for large runs");
  sub->add_flag("--no-reports", c->no_reports, "print the table only; write no report files");
  add_verify_case_option(sub);
  sub->callback([c] { exit_code() = app::run_compare(*c); });
}

}  // namespace tdiff::cli
