#pragma once
// emu: a CPU model of the HIP kernels' arithmetic under a numerics policy, so the whole
// candidate path runs where no GPU exists. Outputs are float64 tensors holding exactly the
// values the kernels would store (already rounded to the storage format). run() looks the
// stage's kind up in a table of per-family handlers (emu/stage_call.h).
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "emu/collective.h"
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
  bool runs_steps() const override { return true; }
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override;

  // A split's rank partials of one stage output, which a later stage reduces (moe.out under
  // moe_reduce=sum_then_reduce adds routed and shared per rank before the all-reduce).
  struct RankPartials {
    std::vector<std::vector<float>> ranks;
    std::vector<double> sum;  // their float64 sum: the value the stage output holds
  };
  void keep_partials(const std::string& key, RankPartials p);
  // The partials kept under `key` when `given` still holds their sum (the consumer reads this
  // run's own tensor, not one fed from the reference); nullopt otherwise.
  std::optional<RankPartials> take_partials(const std::string& key, const Tensor& given);

  // The order probe of the split sweep's vacuity check: each all-reduce is also computed in a
  // second order (tree for ring and the rest, ring for tree) on the same partials, and the
  // elements whose bits differ are counted per stage.
  struct OrderProbe {
    int ranks = 0;
    std::int64_t elements = 0, differing = 0;
  };
  void probe_orders(bool on) { probe_ = on; }
  std::map<std::string, OrderProbe> order_probes() const;
  // The all-reduce of `stage`'s partials in spec's order (probed when probe_orders is on).
  std::vector<float> all_reduce(const std::string& stage, const std::vector<std::vector<float>>& partials,
                                const ReduceSpec& spec);

 private:
  friend struct StageCall;
  // A weight rounded to a GEMM input format, cached per (name, format).
  const std::vector<float>& gemm_weight(WeightStore& w, const std::string& name, Fmt in);

  Policy policy_;
  std::uint64_t run_seed_;
  refcpu::RefCpuBackend refcpu_;  // masks and hash routing are integer logic: identical in every backend
  std::map<std::pair<std::string, int>, std::vector<float>> weight_cache_;
  std::map<std::string, RankPartials> partials_;
  bool probe_ = false;
  std::map<std::string, OrderProbe> probes_;
  mutable std::mutex mutex_;
};

}  // namespace tdiff::emu
