// tdiff stats: the statistics of a case's float64 reference that trained models show
// (attention logits and sinks, massive activations, router margins), per layer.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/options.h"
#include "base/error.h"
#include "casefile/session.h"
#include "checks/model_stats.h"
#include "report/report.h"
#include "report/stats_report.h"

namespace tdiff::cli {

namespace {

struct StatsCmd {
  std::string case_path, model_dir, csv, json;
};

void run_stats(const StatsCmd& c) {
  CaseSession session = open_session(c.case_path, c.model_dir);
  if (session.reference().stages().empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  const ModelStats m = compute_model_stats(session);
  print_stats(stdout, m);
  if (!c.csv.empty()) write_file_atomic(c.csv, render_stats_csv(m));
  if (!c.json.empty()) write_file_atomic(c.json, render_stats_json(m));
}

}  // namespace

void setup_stats(CLI::App& app) {
  auto c = std::make_shared<StatsCmd>();
  auto* cmd = app.add_subcommand(
      "stats", "Per layer: attention logits, entropy and sinks, massive activations and router margins of the reference");
  cmd->footer(
      "Recomputes the attention logits from the stored inputs of every Lxx.attn.core with the reference's own code;\n"
      "the formulas are in src/checks/model_stats.h. A case made from a real checkpoint gives its numbers the same way.\n"
      "Examples:\n"
      "  tdiff stats case.h5\n"
      "  tdiff stats case.h5 --csv stats.csv --json stats.json\n"
      "  tdiff synth --preset tiny --profile trained --seed 1 -o /tmp/tt && tdiff case new --model /tmp/tt "
      "--random-prompts 2 --len 40 --seed 1 -o /tmp/tt.h5 && tdiff golden /tmp/tt.h5 && tdiff stats /tmp/tt.h5\n"
      "Exit code: 0, or 2 when the case lacks the reference tensors it needs (named).");
  cmd->add_option("case", c->case_path, "case file with a reference (tdiff golden)")->required();
  cmd->add_option("--model", c->model_dir, "model folder (default: the path the case records); sinks and routing bias");
  cmd->add_option("--csv", c->csv, "also write the table as CSV to this file");
  cmd->add_option("--json", c->json, "also write the table as JSON to this file");
  add_verify_case_option(cmd);
  cmd->callback([c] { run_stats(*c); });
}

}  // namespace tdiff::cli
