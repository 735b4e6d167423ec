#include "cli/options.h"

#include <fmt/format.h>

#include "casefile/h5_common.h"
#include "exec/backend_registry.h"

namespace tdiff::cli {

void add_options(CLI::App* cmd, app::CandidateOptions& o) {
  add_backend_option(cmd, o.backend, false);
  cmd->add_option("--policy", o.policy, "numerics policy: naive, fixed, fp32, or a .toml/.json policy file");
  cmd->add_option("--set", o.sets, "override a knob: 'PATTERN:knob=value' or 'knob=value' (repeatable)");
  cmd->add_option("--seed", o.seed, "run seed for atomic orders and unstable ties (default: from the run id)");
  cmd->add_option("--model", o.model_dir, "model folder (default: the path the case records)");
  add_hip_gemm_option(cmd, o.hip_gemm);
  add_split_options(cmd, o.sets);
}

void add_split_options(CLI::App* cmd, std::vector<std::string>& sets) {
  auto as_set = [&sets](const char* key) {
    return [&sets, key](const std::string& v) { sets.push_back(std::string(key) + "=" + v); };
  };
  cmd->add_option_function<std::string>("--tp", as_set("tp"),
                                        "tensor-parallel ranks (1, 2, 4, 8; must divide the heads and output groups): "
                                        "attn.o_b and the MoE down projections split their K, then all-reduce "
                                        "(emu; hip simulates the ranks on one device; docs/guide/tensor-parallel.md)");
  cmd->add_option_function<std::string>("--ep", as_set("ep"),
                                        "expert-parallel ranks (must divide the routed experts): experts whole, "
                                        "combined in owning-rank order (emu and hip)");
  cmd->add_option_function<std::string>("--allreduce", as_set("allreduce"),
                                        "the all-reduce's order: ring (NCCL/RCCL ring, default), tree (one node's chain), "
                                        "fixed (rank order), custom1, custom2 (vLLM's one- and two-stage kernels: "
                                        "float32, rounded once)")
      ->check(CLI::IsMember({"ring", "tree", "fixed", "custom1", "custom2"}));
  cmd->add_option_function<std::string>("--moe-reduce", as_set("moe_reduce"),
                                        "sum_then_reduce (SGLang: routed + shared per rank, one all-reduce; default) or "
                                        "reduce_each (two all-reduces, then the add)")
      ->check(CLI::IsMember({"sum_then_reduce", "reduce_each"}));
  cmd->add_option_function<std::string>("--channels", as_set("channels"),
                                        "collective channels (default 1): each channel cuts its own ring chunks");
}

void add_candidate_cmd_option(CLI::App* cmd, app::CandidateOptions& o) {
  cmd->add_option("--candidate-cmd", o.candidate_cmd,
                  "your engine as the candidate: a shell command tdiff runs for every run it needs, with the "
                  "request file in $TDIFF_REQUEST (and for {request}): the case, where to write the dump, the stages "
                  "to take from the reference (docs/reference/engine-protocol.md); --policy names the formats it "
                  "computes in")
      ->excludes(cmd->get_option("--backend"))
      ->excludes(cmd->get_option("--hip-gemm"));
}

void add_verify_case_option(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--verify-case",
         [](const std::string& mode) { h5::set_case_check(mode == "full" ? h5::CaseCheck::full : h5::CaseCheck::quick); },
         "check each case file against the checksum it records before reading it: quick (size, first and last MiB "
         "and 16 samples) or full (SHA-256 of the whole file); default: full up to 1 GiB, quick above "
         "(TDIFF_VERIFY_CASE=quick|full sets it too)")
      ->check(CLI::IsMember({"quick", "full"}));
}

void add_hip_gemm_option(CLI::App* cmd, std::string& hip_gemm) {
  cmd->add_option("--hip-gemm", hip_gemm,
                  "hip: where 16-bit GEMMs and attention's products run: matrix (matrix cores: MFMA / tensor "
                  "cores, the hardware's summation order inside a 16-deep product) or vector (vector ALU, emu's sums "
                  "bit for bit)")
      ->check(CLI::IsMember({"matrix", "vector"}))
      ->capture_default_str();
}

void add_backend_option(CLI::App* cmd, std::string& backend, bool with_reference) {
  std::string help = "backend";
  for (const auto& e : backend_registry())
    if (e.candidate || with_reference)
      help += fmt::format("{} {}: {}{}", help == "backend" ? ":" : ";", e.name, e.description, e.built ? "" : " (not in this build)");
  cmd->add_option("--backend", backend, help)->check(CLI::IsMember(backend_names(with_reference)))->capture_default_str();
}

void add_options(CLI::App* cmd, app::ReportOptions& o) {
  cmd->add_option("--thresholds", o.thresholds,
                  "thresholds file (TOML: [default] and [[rule]] stages = glob), or a named set: precision (default: "
                  "errors against what the candidate's formats explain), scaled, paper (the paper's absolute bounds)");
  cmd->add_option("--threshold", o.overrides, "override 'KEY=VALUE' or 'GLOB:KEY=VALUE[,KEY=VALUE]' (repeatable)");
  cmd->add_option("-o,--out", o.out_dir, "report folder (default reports/<case>/<run-id>)");
  cmd->add_option("--run-id", o.run_id, "run id (default: time-based)");
  cmd->add_flag("--all", o.all_rows, "print every tensor, not only WARN/FAIL, for large runs");
  cmd->add_flag("--no-reports", o.no_reports, "print the table only; write no report files");
}

void add_options(CLI::App* cmd, app::WeightCheckOptions& o) {
  cmd->add_flag("--force", o.force,
                "go on when the model's weight files differ from what the case records (a warning, and the run's "
                "environment record says it was forced)");
  cmd->add_option("--verify-weights", o.verify,
                  "quick: size, time and a fingerprint of each weight file (the whole file is hashed only when its "
                  "time changed); full: SHA-256 of every file")
      ->check(CLI::IsMember({"quick", "full"}))
      ->capture_default_str();
}

void add_options(CLI::App* cmd, app::HistoryOptions& o) {
  cmd->add_option("--history", o.history,
                  "the run history to record into (default: $TDIFF_HISTORY, else tdiff-history.sqlite beside the case)");
  cmd->add_option("--label", o.label,
                  "the series this run belongs to in `tdiff history` and `tdiff gate` (a build, a branch; default: "
                  "the build's commit, backend and policy)");
  cmd->add_flag("--no-record", o.no_record, "record nothing in the run history (the case file is only read either way)");
}

}  // namespace tdiff::cli
