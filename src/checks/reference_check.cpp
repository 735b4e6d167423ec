#include "checks/reference_check.h"

#include <cmath>
#include <set>

#include "base/error.h"
#include "backend/executor.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

namespace {

double relative_l2(const Tensor& fresh, const Tensor& stored) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < stored.numel(); ++i) {
    const double a = fresh.value(i), b = stored.value(i);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;  // non-finite entries are compared bit for bit
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

std::vector<ReferenceDiff> check_reference(CaseSession& session, TieRule rule,
                                           const std::function<void(std::size_t, const Stage&)>& on_stage) {
  ReferenceStore& refs = session.reference();
  // A boundaries reference's other stages are recomputed from the stored ones: not verified
  // against themselves, but computed here from the stored inputs like any stage.
  const bool boundaries = refs.store_kind() == kStoreBoundaries;
  const auto& stored_stages = refs.stored_stages();
  const std::set<std::string> have(stored_stages.begin(), stored_stages.end());
  for (const auto& s : session.stages)
    if (!have.count(s.name) && !boundaries)
      input_error("{}: stage {} has no stored reference to verify (run `tdiff golden {}` without --stages)", session.path,
                  s.name, session.path);
  RunContext ctx = session.context(rule);
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(session.info.batch, env);
  std::vector<ReferenceDiff> diffs;
  std::vector<Tensor> stored;  // the stage's stored outputs, read once
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    if (on_stage) on_stage(i, s);
    stored.clear();
    if (!have.count(s.name)) return;
    for (std::size_t k = 0; k < out.size(); ++k) {
      stored.push_back(session.reference().get(s.name, s.outputs[k]));
      const Tensor fresh = is_float(out[k].dtype()) && out[k].dtype() != stored[k].dtype() ? out[k].to(stored[k].dtype()) : out[k];
      ReferenceDiff d{s.name, s.outputs[k], bit_diff(fresh, stored[k]), !is_float(stored[k].dtype())};
      if (!d.integer && fresh.shape() == stored[k].shape()) d.rel_l2 = relative_l2(fresh, stored[k]);
      else if (!d.bits.identical()) d.rel_l2 = INFINITY;
      diffs.push_back(std::move(d));
    }
  };
  // Later stages read the stored outputs, not this build's.
  hooks.replace = [&](const Stage& s, std::size_t, std::vector<Tensor>& replacement) {
    if (!have.count(s.name)) return false;
    replacement = std::move(stored);
    stored.clear();
    return true;
  };
  execute(session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
  return diffs;
}

}  // namespace tdiff
