#include "cli/candidate.h"

#include <fmt/format.h>

#include "cli/shell.h"
#include "core/error.h"
#include "emu/emu_backend.h"
#if defined(TDIFF_WITH_HIP)
#include "hip/hip_backend.h"
#endif

namespace tdiff::cli {

void CandidateOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--backend", backend, "candidate backend: emu (CPU model of the HIP numerics) or hip (GPU; where built with TDIFF_HIP)")
      ->check(CLI::IsMember({"emu", "hip"}));
  cmd->add_option("--policy", policy, "numerics policy: naive, fixed, fp32, or a .toml/.json policy file");
  cmd->add_option("--set", sets, "override a knob: 'PATTERN:knob=value' or 'knob=value' (repeatable)");
  cmd->add_option("--seed", seed, "run seed for atomic orders and unstable ties (default: from the run id)");
  cmd->add_option("--model", model_dir, "model folder (default: the path the case records)");
  add_hip_gemm_option(cmd, hip_gemm);
}

void add_hip_gemm_option(CLI::App* cmd, std::string& hip_gemm) {
  cmd->add_option("--hip-gemm", hip_gemm,
                  "hip: where 16-bit GEMMs and attention's products run: matrix (matrix cores: MFMA / tensor "
                  "cores, the hardware's summation order inside a 16-deep product) or vector (vector ALU, emu's sums "
                  "bit for bit)")
      ->check(CLI::IsMember({"matrix", "vector"}))
      ->capture_default_str();
}

Policy CandidateOptions::make_policy(const CaseSession& session) const {
  Policy p = Policy::load(policy);
  for (const auto& s : sets) p.add_set(s);
  p.validate(session.stages);
  return p;
}

std::string CandidateOptions::flags() const {
  std::string s = fmt::format(" --backend {} --policy {}", backend, shell_quote(policy));
  for (const auto& x : sets) s += " --set " + shell_quote(x);
  s += fmt::format(" --seed {}", seed);
  if (backend == "hip") s += " --hip-gemm " + hip_gemm;
  return s;
}

std::unique_ptr<Backend> make_candidate(const std::string& backend, const Policy& policy, std::uint64_t seed,
                                        const std::string& hip_gemm) {
  if (hip_gemm != "matrix" && backend != "hip")
    input_error("--hip-gemm {} applies to --backend hip, not {}", hip_gemm, backend);
  if (backend == "emu") return std::make_unique<emu::EmuBackend>(policy, seed);
#if defined(TDIFF_WITH_HIP)
  if (backend == "hip") {
    auto b = std::make_unique<hip::HipBackend>(policy, seed);
    b->set_matrix_cores(hip_gemm == "matrix");
    return b;
  }
#endif
  input_error("backend '{}' is not built into this tdiff (configure with -DTDIFF_HIP=AMD or NVIDIA)", backend);
}

}  // namespace tdiff::cli
