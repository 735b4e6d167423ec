// tdiff: differential testing of a GPU port of DeepSeek-V4-Flash against a float64 reference.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "cli/command.h"
#include "base/error.h"
#include "base/runtime_env.h"
#include "base/temp_files.h"
#include "base/version.h"

namespace tdiff::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
}  // namespace tdiff::cli

int main(int argc, char** argv) {
  using namespace tdiff;
  reexec_with_runtime_env(argv);  // OMP_WAIT_POLICY, OPENBLAS_CORETYPE (base/runtime_env.h)
  install_temp_cleanup();         // SIGINT/SIGTERM remove the temporary files (base/temp_files.h)
  CLI::App app{"tdiff: does the GPU port still compute the same model, and if not, which operator broke it?"};
  app.set_version_flag("--version", std::string("tdiff ") + TDIFF_VERSION + " (" + TDIFF_GIT_COMMIT + ")");
  app.require_subcommand(1);
  app.fallthrough();
  // One line per subcommand, in the order `tdiff --help` lists them.
  cli::setup_synth(app);
  cli::setup_case(app);
  cli::setup_info(app);
  cli::setup_golden(app);
  cli::setup_run(app);
  cli::setup_compare(app);
  cli::setup_bisect(app);
  cli::setup_determinism(app);
  cli::setup_ci(app);
  cli::setup_audit(app);
  cli::setup_stats(app);
  cli::setup_history(app);
  cli::setup_gate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other input error (CLI11's own exit() adds a second).
    fmt::print(stderr, "tdiff: error: {} (see --help)\n", e.what());
    return 2;
  } catch (const InputError& e) {
    fmt::print(stderr, "tdiff: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tdiff: internal error: {}\n", e.what());
    return 3;
  }
  return cli::exit_code();
}
