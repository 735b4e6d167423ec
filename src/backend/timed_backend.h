#pragma once
#include "backend/backend.h"
#include "base/timing.h"

namespace tdiff {

// A backend whose run() and finish() add their wall time to a phase: the executor's own view
// of where a mixed run's time goes, without touching the backends.
class TimedBackend final : public Backend {
 public:
  TimedBackend(Backend& b, PhaseTimes& t, const char* run_phase, const char* finish_phase)
      : b_(b), t_(t), run_phase_(run_phase), finish_phase_(finish_phase) {}
  std::string name() const override { return b_.name(); }
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override {
    auto s = t_.measure(run_phase_);
    return b_.run(stage, inputs, ctx);
  }
  bool implements(OpKind kind) const override { return b_.implements(kind); }
  bool deferred_outputs() const override { return b_.deferred_outputs(); }
  void finish() override {
    auto s = t_.measure(finish_phase_);
    b_.finish();
  }
  void release(const std::string& key) override { b_.release(key); }
  std::map<std::string, std::string> environment() const override { return b_.environment(); }
  const Policy* policy() const override { return b_.policy(); }
  bool runs_steps() const override { return b_.runs_steps(); }

 private:
  Backend& b_;
  PhaseTimes& t_;
  const char* run_phase_;
  const char* finish_phase_;
};

}  // namespace tdiff
