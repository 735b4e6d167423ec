// tdiff ci: every case of a golden prompt set against its cached reference, one verdict.
#include <memory>

#include <fmt/format.h>

#include "app/ci_command.h"
#include "cli/command.h"
#include "cli/options.h"

namespace tdiff::cli {

void setup_ci(CLI::App& app) {
  auto c = std::make_shared<app::CiCmd>();
  auto* cmd = app.add_subcommand("ci", "Run every case of a golden prompt set (cases/<set>) and gate on one verdict");
  cmd->footer(
      "Examples:\n"
      "  tdiff ci cases/tiny                                  # emu, fixed policy; what CI runs\n"
      "  tdiff ci cases/tiny --policy naive                   # caught: exit 1\n"
      "  tdiff ci cases/small --cases 'long-*' -o reports/ci-small\n"
      "  tdiff ci cases/tiny --prepare                        # each case's file and the model, to run an engine on\n"
      "  tdiff ci cases/tiny --candidate-dumps dumps/ --dump-policy fixed   # that engine's dumps/<case>.h5 judged\n"
      "  tdiff ci cases/tiny --candidate-cmd 'build/tap_emu --request fixed' --dump-policy fixed   # tdiff runs it\n"
      "Models and references are built on first use into <set>/cache/<hash>/ (rebuilt when\n"
      "suite.toml, the token file or the tdiff version change). cases/README.md describes the format.\n"
      "--backend hip needs a tdiff built with -DTDIFF_HIP=AMD or NVIDIA and a GPU.\n"
      "Exit code: 0 every case passes (warnings allowed), 1 a case fails, 2 usage or input error.");
  cmd->add_option("suite", c->suite, "golden prompt set: a folder with suite.toml")->required();
  add_backend_option(cmd, c->backend, false);
  cmd->add_option("--policy", c->policy, "numerics policy: naive, fixed, fp32, or a policy file")->capture_default_str();
  add_hip_gemm_option(cmd, c->hip_gemm);
  cmd->add_option("--set", c->sets, "override a knob: 'PATTERN:knob=value' (repeatable)");
  add_split_options(cmd, c->sets);
  cmd->add_option("--thresholds", c->thresholds, "thresholds file (default: the suite's)");
  cmd->add_option("--threshold", c->overrides, "override 'GLOB:KEY=VALUE' (repeatable)");
  cmd->add_option("--cases", c->cases, "run only the cases whose names match these globs");
  cmd->add_option("--repeat", c->repeat, "candidate runs per case compared bit for bit (default: the suite's)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("-o,--out", c->out_dir, "report folder (default reports/ci/<set>/<run-id>)");
  cmd->add_option("--cache", c->cache_dir, "cache folder for models and references (default <set>/cache)");
  cmd->add_flag("--rebuild", c->rebuild, "rebuild the cached models and references");
  cmd->add_option("--run-id", c->run_id, "run id (default: time-based)");
  add_options(cmd, c->history);
  cmd->add_option("--timed", c->timed, "time N forwards of each case after its compared run, as `tdiff run --timed`")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--gate", c->gate_baseline,
                  "after the run, hold its records to this baseline label's as `tdiff gate` does (exit 1 when it fails)");
  cmd->add_option_function<std::string>("--gate-speed", [c](const std::string& v) { c->gate_speed = v == "on"; },
                                        "on (default): --gate judges the --timed speed too; off: accuracy only")
      ->check(CLI::IsMember({"on", "off"}));
  auto* dumps = cmd->add_option("--candidate-dumps", c->dumps_dir,
                                "judge an external implementation's dumps instead of running a backend: FOLDER/<case>.h5 "
                                "per case (tdiff-capture, the tap; python/README.md)");
  auto* engine = cmd->add_option("--candidate-cmd", c->candidate_cmd,
                                 "run your engine on every case instead: a shell command tdiff runs once per case with "
                                 "the request file in $TDIFF_REQUEST (docs/reference/engine-protocol.md), its dumps "
                                 "then judged as --candidate-dumps")
                     ->excludes(dumps);
  cmd->add_option("--dump-policy", c->dump_policy,
                  "the formats the dumps store in (fixed: a bf16 port with float32 sums), which gives their tensors "
                  "the tolerances from precision (default: none, the scaled rule)");
  cmd->add_option("--measured-floor", c->measured_floor,
                  "on: hold each tensor to both rules, the expected error and the ratio to emu run in the candidate's "
                  "storage and stream formats, as tdiff run does (dumps: with --dump-policy); off: the expected error "
                  "alone")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  auto* prepare = cmd->add_flag("--prepare", c->prepare,
                                "build the model and the references only, and print each case's name, case file and "
                                "model folder (tab-separated) for the implementation to run on");
  for (const char* opt : {"--backend", "--policy", "--set", "--repeat", "--hip-gemm", "--tp", "--ep"}) {
    dumps->excludes(cmd->get_option(opt));
    engine->excludes(cmd->get_option(opt));
  }
  for (const char* opt : {"--candidate-dumps", "--candidate-cmd", "-o", "--run-id", "--repeat", "--backend", "--policy", "--set", "--hip-gemm",
                          "--thresholds", "--threshold"})
    prepare->excludes(cmd->get_option(opt));
  add_verify_case_option(cmd);
  cmd->callback([c] { exit_code() = app::run_ci(*c); });
}

}  // namespace tdiff::cli
