// tdiff history and tdiff gate: the run history read back (app/history_command.h).
#include <memory>

#include "app/history_command.h"
#include "cli/command.h"

namespace tdiff::cli {

void setup_history(CLI::App& app) {
  auto c = std::make_shared<app::HistoryCmd>();
  auto* cmd = app.add_subcommand("history", "The recorded runs of a case or golden set, as series over builds");
  cmd->footer(
      "Examples:\n"
      "  tdiff history case.h5                      # builds (labels) with speed and accuracy, and their steps\n"
      "  tdiff history case.h5 --html history.html  # the dual curve: time against accuracy per build\n"
      "  tdiff history cases/tiny --kind ci         # a golden set's ci runs, case by case");
  cmd->add_option("target", c->target, "a case file, a golden set's folder, or a folder holding tdiff-history.sqlite")
      ->required();
  cmd->add_option("--history", c->history, "the run history file (default: beside the case, or the set's cache/)");
  cmd->add_option("--label", c->label, "only runs with this label");
  cmd->add_option("--kind", c->kind, "only runs of this command")
      ->check(CLI::IsMember({"run", "ci", "bisect", "determinism", "batch-sweep", "tp-sweep"}));
  cmd->add_option("--html", c->html, "also write the page with the dual curve and the series' charts to this file");
  cmd->add_option("--noise", c->noise,
                  "the least change, relative to a series' median, that is a step (the repeats' spread when larger)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_flag("--runs", c->runs, "list every run under its case, not only the builds");
  cmd->callback([c] { exit_code() = app::run_history(*c); });
}

void setup_gate(CLI::App& app) {
  auto c = std::make_shared<app::GateCmd>();
  auto* cmd = app.add_subcommand("gate", "Pass a build only when it is as accurate and as fast as a baseline build");
  cmd->footer(
      "Examples:\n"
      "  tdiff run case.h5 --timed 5 --label main && tdiff run case.h5 --timed 5 --label my-branch\n"
      "  tdiff gate case.h5 --baseline main          # the candidate: the newest run's label\n"
      "  tdiff gate cases/tiny --baseline main --candidate my-branch --speed off\n"
      "Exit code: 0 pass, 1 the candidate is less accurate, slower, unverified or unexplainedly better, 2 input error.");
  cmd->add_option("target", c->target, "a case file, a golden set's folder, or a folder holding tdiff-history.sqlite")
      ->required();
  cmd->add_option("--history", c->history, "the run history file (default: beside the case, or the set's cache/)");
  cmd->add_option("--baseline", c->gate.baseline, "the label of the build to hold the candidate to")->required();
  cmd->add_option("--candidate", c->gate.candidate, "the candidate's label (default: the newest run's)");
  cmd->add_option("--error-tolerance", c->gate.error_tolerance,
                  "an error change within this share of the baseline's error is noise (the repeats' spread when larger)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--speed-tolerance", c->gate.speed_tolerance,
                  "a slowdown within this share of the baseline's forward is noise (the repeats' spread when larger)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option_function<std::string>("--speed", [c](const std::string& v) { c->gate.speed = v == "on"; },
                                        "on (default): judge the verified timed forwards; off: accuracy only")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_flag("--accept-improvements", c->gate.accept_improvements,
                "an error that dropped beyond the noise is a note, not a flag that fails the gate");
  cmd->callback([c] { exit_code() = app::run_gate(*c); });
}

}  // namespace tdiff::cli
