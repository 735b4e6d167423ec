#pragma once
// The float64 reference backend: every operator kind of the stage graph, exact to the
// published architecture, bit-identical for any thread count.
#include "backend/backend.h"

namespace tdiff::refcpu {

class RefCpuBackend final : public Backend {
 public:
  std::string name() const override { return "refcpu"; }
  // The kinds the family files registered (refcpu/stage_call.h).
  bool implements(OpKind kind) const override;
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override;
  bool runs_steps() const override { return true; }
};

}  // namespace tdiff::refcpu
