#pragma once
// emu: a CPU model of the HIP kernels' arithmetic under a numerics policy, so the whole
// candidate path runs where no GPU exists. Outputs are float64 tensors holding exactly the
// values the kernels would store (already rounded to the storage format). run() looks the
// stage's kind up in a table of per-family handlers (emu/stage_call.h).
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "emu/numerics.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::emu {

struct StageCall;

class EmuBackend final : public Backend {
 public:
  // run_seed: identity of this run; atomic reductions and unstable ties derive their order
  // from it, so two runs with different seeds can differ exactly where a GPU's would.
  EmuBackend(Policy policy, std::uint64_t run_seed) : policy_(std::move(policy)), run_seed_(run_seed) {}
  std::string name() const override { return "emu"; }
  bool implements(OpKind kind) const override;
  const Policy* policy() const override { return &policy_; }
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override;

 private:
  friend struct StageCall;
  // A weight rounded to a GEMM input format, cached per (name, format).
  const std::vector<float>& gemm_weight(WeightStore& w, const std::string& name, Fmt in);

  Policy policy_;
  std::uint64_t run_seed_;
  refcpu::RefCpuBackend refcpu_;  // masks and hash routing are integer logic: identical in every backend
  std::map<std::pair<std::string, int>, std::vector<float>> weight_cache_;
  std::mutex mutex_;
};

}  // namespace tdiff::emu
