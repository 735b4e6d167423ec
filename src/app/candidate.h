#pragma once
// The options every command that runs a candidate shares (run, bisect, audit, determinism):
// backend, numerics policy with --set overrides, run seed, model override, and for hip the
// unit its 16-bit GEMMs run on.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/env_record.h"
#include "numerics/policy.h"
#include "casefile/session.h"

namespace tdiff::app {

struct CandidateOptions {
  std::string backend = "emu";
  std::string policy = "fixed";
  std::vector<std::string> sets;  // "PATTERN:knob=value"
  std::uint64_t seed = 0;         // run seed (atomic orders, unstable ties); 0: derived from the run id
  std::string model_dir;
  std::string hip_gemm = "matrix";  // hip: "matrix" (matrix cores where the device has them) or "vector"
  // An engine tdiff runs as a process instead of a backend (exec/engine_backend.h); `policy`
  // then names the formats it computes in.
  std::string candidate_cmd;

  // The policy with the --set overrides, validated against the model's stages.
  Policy make_policy(const CaseSession& session) const;
  // " --backend emu --policy fixed --set ..." for reproduce commands.
  std::string flags() const;
  // The candidate: the backend by name, or the engine of candidate_cmd run on `session`.
  std::unique_ptr<Backend> make(CaseSession& session, const Policy& policy, std::uint64_t seed) const;
  // "emu under fixed", "engine 'CMD' under fixed".
  std::string label(const Policy& policy) const;
  // With candidate_cmd, the environment record says so: backend "engine", the command, and the
  // engine's own record from its last dump (`candidate`, when at hand) as engine.*.
  void note_engine(EnvRecord& env, const Backend* candidate) const;
};

// The candidate backend by name, from the registry (exec/backend_registry.h). `hip_gemm`:
// "matrix" or "vector" (the vector ALU, whose sums equal emu's bit for bit); anything but
// "matrix" with another backend is an input error.
std::unique_ptr<Backend> make_candidate(const std::string& backend, const Policy& policy, std::uint64_t seed,
                                        const std::string& hip_gemm = "matrix");
// The environment record of a candidate run: capture_env, the GPU of a device backend (from
// `candidate`'s environment(), or from one made to ask when null), and the expanded policy
// (policy_knobs, policy_stages: Policy::expand). Case facts: add_case_facts.
EnvRecord candidate_env(const std::string& backend, const Policy& policy, const std::vector<Stage>& stages,
                        const Backend* candidate, const std::string& hip_gemm = "matrix");

}  // namespace tdiff::app
