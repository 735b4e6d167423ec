#pragma once
// One file per subcommand: `setup_<name>(CLI::App&)` declares the flags and a callback that
// calls the library. The callback stores the process exit code in `exit_code()`.
#include <CLI/CLI.hpp>

namespace tdiff::cli {

int& exit_code();

// One declaration per subcommand (defined in cmd_<name>.cpp).
void setup_synth(CLI::App& app);
void setup_case(CLI::App& app);
void setup_info(CLI::App& app);
void setup_golden(CLI::App& app);
void setup_run(CLI::App& app);
void setup_compare(CLI::App& app);
void setup_bisect(CLI::App& app);
void setup_determinism(CLI::App& app);
void setup_ci(CLI::App& app);
void setup_audit(CLI::App& app);
void setup_stats(CLI::App& app);
void setup_history(CLI::App& app);  // cmd_history.cpp
void setup_gate(CLI::App& app);     // cmd_history.cpp

}  // namespace tdiff::cli
