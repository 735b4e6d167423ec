#include "app/candidate.h"

#include <fmt/format.h>

#include "app/shell.h"
#include "base/error.h"
#include "exec/backend_registry.h"
#include "exec/engine_backend.h"

namespace tdiff::app {

Policy CandidateOptions::make_policy(const CaseSession& session) const {
  Policy p = Policy::load(policy);
  for (const auto& s : sets) p.add_set(s);
  p.validate(session.stages);
  check_split(p.split(), session.info.config);
  return p;
}

std::string CandidateOptions::flags() const {
  // --model first: without it a reproduce line of a case whose model was given elsewhere fails.
  std::string s = model_dir.empty() ? "" : " --model " + shell_quote(absolute_path(model_dir));
  s += candidate_cmd.empty() ? fmt::format(" --backend {} --policy {}", backend, shell_quote(policy))
                            : fmt::format(" --candidate-cmd {} --policy {}", shell_quote(candidate_cmd), shell_quote(policy));
  for (const auto& x : sets) s += " --set " + shell_quote(x);
  s += fmt::format(" --seed {}", seed);
  if (backend == "hip" && candidate_cmd.empty()) s += " --hip-gemm " + hip_gemm;
  return s;
}

std::unique_ptr<Backend> CandidateOptions::make(CaseSession& session, const Policy& p, std::uint64_t run_seed) const {
  if (!candidate_cmd.empty() && p.split().active())
    input_error("--tp/--ep: an engine run by --candidate-cmd splits itself; tdiff models a split on --backend emu and simulates one on --backend hip");
  if (!candidate_cmd.empty()) return std::make_unique<EngineBackend>(candidate_cmd, session, p, run_seed);
  return make_candidate(backend, p, run_seed, hip_gemm);
}

std::string CandidateOptions::label(const Policy& p) const {
  return candidate_cmd.empty() ? fmt::format("{} under {}", backend, p.describe())
                               : fmt::format("engine '{}' under {}", candidate_cmd, p.describe());
}

void CandidateOptions::note_engine(EnvRecord& env, const Backend* candidate) const {
  if (candidate_cmd.empty()) return;
  env.backend = "engine";
  env.extra["candidate_cmd"] = candidate_cmd;
  if (candidate)
    for (const auto& [k, v] : candidate->environment()) env.extra["engine." + k] = v;
}

std::unique_ptr<Backend> make_candidate(const std::string& backend, const Policy& policy, std::uint64_t seed,
                                        const std::string& hip_gemm) {
  return make_backend(backend, policy, {seed, hip_gemm});
}

EnvRecord candidate_env(const std::string& backend, const Policy& policy, const std::vector<Stage>& stages,
                        const Backend* candidate, const std::string& hip_gemm) {
  EnvRecord env = capture_env(backend, policy.describe(), process_command_line());
  std::unique_ptr<Backend> asked;
  if (!candidate && backend_entry(backend).gpu) candidate = (asked = make_candidate(backend, policy, 0, hip_gemm)).get();
  if (candidate)
    for (const auto& [k, v] : candidate->environment()) env.extra[k] = v;
  const Policy::Expanded e = policy.expand(stages);
  env.extra["policy_knobs"] = e.knobs;
  if (policy.split().active()) env.extra["split"] = policy.split().describe();
  env.extra["policy_stages"] = e.stages.empty() ? "(none: every stage runs with policy_knobs)" : fmt::format("{}", fmt::join(e.stages, "\n"));
  return env;
}

}  // namespace tdiff::app
