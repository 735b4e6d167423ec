// tdiff info: what a case file or a model folder holds, the model's stage list, the knob
#include <memory>

#include <fmt/format.h>

#include "app/info_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_info(CLI::App& app) {
  auto o = std::make_shared<app::InfoOptions>();
  auto* cmd = app.add_subcommand("info", "Describe a case file or a model folder");
  auto* c = cmd->add_option("case", o->case_path, "Case file (.h5)");
  auto* m = cmd->add_option("--model", o->model, "Model folder instead of a case file");
  c->excludes(m);
  cmd->add_option("--stages", o->stages,
                  "Also list the stages, optionally only those matching globs ('L0[0-2].attn.*,lm_head')")
      ->expected(0, 1)
      ->default_str("*");
  auto* j = cmd->add_flag("--json", o->json,
                          "With a case file: print what each stage's tensors must be for this case (name, dtype, "
                          "shape, named axes, the range of selection ids) as a JSON array, for --stages or every stage");
  j->needs(c)->excludes(m);
  auto runs = std::make_shared<std::string>("5");
  cmd->add_option("--runs", *runs, "With a case file: how many of the newest environment records, saved runs and "
                                   "runs of the run history to show, or all")
      ->capture_default_str()
      ->needs(c)
      ->check([](const std::string& v) {
        const bool count = !v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
        return v == "all" || (count && std::stoul(v) > 0)
                   ? std::string()
                   : std::string("a positive count or all");
      })
      ->each([o, runs](const std::string& v) { o->runs = v == "all" ? 0 : std::stoul(v); });
  cmd->add_option("--history", o->history, "With a case file: the run history to list (default: beside the case)")
      ->needs(c);
  auto* k = cmd->add_flag("--knobs", o->knobs,
                          "Print the fault catalog: every policy knob, its bad and fixed settings, the operator kinds "
                          "it changes and what the bad setting does (a Markdown table)");
  k->excludes(c)->excludes(m);
  cmd->add_flag("--ops", o->ops,
                "Print the operator table: every operator kind, its family, output kind, whether it selects ids, "
                "and its coverage (the backends that implement it, the GPU test that checks it)")
      ->excludes(c)
      ->excludes(m)
      ->excludes(k);
  auto* dump_format = cmd->add_flag("--dump-format", o->dump_format,
                                    "Print every tensor a dump may hold: its axes, the dtypes a dump may store it in, "
                                    "its operator kind and the layer types that have it (a Markdown table)");
  dump_format->excludes(c)->excludes(m)->excludes(k)->excludes(cmd->get_option("--ops"));
  cmd->footer(
      "Examples:\n"
      "  tdiff info tiny.h5\n"
      "  tdiff info tiny.h5 --runs all   (every environment record and saved run, not the newest 5)\n"
      "  tdiff info --model tiny-model --stages\n"
      "  tdiff info --model tiny-model --stages 'L00.attn.*'\n"
      "  tdiff info tiny.h5 --stages --json   (what each stored tensor must be, for this case)\n"
      "  tdiff info --knobs\n"
      "  tdiff info --ops\n"
      "  tdiff info --dump-format   (every tensor a dump may hold)\n");
  add_verify_case_option(cmd);
  cmd->callback([o] {
    if (o->knobs) return app::print_knobs();
    if (o->ops) return app::print_ops();
    if (o->dump_format) return app::print_dump_format();
    if (o->case_path.empty() && o->model.empty()) throw CLI::RequiredError("a case file or --model");
    if (!o->model.empty()) app::info_model(*o);
    else app::info_case(*o);
  });
}

}  // namespace tdiff::cli
