#include "exec/measured_floor.h"

#include <fmt/format.h>

#include <map>

#include "diff/expected.h"
#include "emu/emu_backend.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

namespace {

std::string knob_value(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::f8_e4m3: return "fp8";
    default: return "fp32";
  }
}

}  // namespace

Policy floor_policy(const std::vector<Stage>& stages, const Policy& candidate) {
  const PortFormats port = port_formats(stages, candidate);
  // fp32 with the port's formats: its storage and stream, and GEMM operands in its storage
  // format (the tolerance model's u_w); on a bf16 port this is the fixed preset.
  Policy p = Policy::preset("fp32");
  p.add_set("storage=" + knob_value(port.storage));
  p.add_set("stream=" + knob_value(port.stream));
  p.add_set("matmul_input=" + knob_value(port.storage));
  // A split candidate's floor is split the same way: its partials and hops are formats' error.
  if (const Split& s = candidate.split(); s.active())
    for (const std::string& kv : {fmt::format("tp={}", s.tp), fmt::format("ep={}", s.ep),
                                  "allreduce=" + allreduce_name(s.allreduce), "moe_reduce=" + moe_reduce_name(s.moe_reduce),
                                  fmt::format("channels={}", s.channels)})
      p.add_set(kv);
  return p;
}

FloorRun attach_measured_floor(CaseSession& session, const Policy& candidate, const MixedRunOptions& mo,
                               CompareResult& diff) {
  const Policy policy = floor_policy(session.stages, candidate);
  emu::EmuBackend floor(policy, 0);
  refcpu::RefCpuBackend reference;
  MixedRunOptions o;
  o.compare = mo.compare;
  o.diff = mo.diff;
  // The formats' error on the reference's choices, whatever the candidate's selection mode: a
  // replayed run has no flips, a free one is judged on its own path (followed_reference.h),
  // where a flip adds nothing either.
  o.replay_selections = true;
  RunContext ctx = session.context();
  const std::vector<bool> all(session.stages.size(), true);
  const MixedRunResult r = run_mixed(session, floor, reference, all, ctx, o);
  std::map<std::string, const TensorDiff*> by_key;
  for (const auto& row : r.diff.rows) by_key[row.key()] = &row;
  FloorRun out;
  out.label = policy.describe();
  out.seconds = r.seconds;
  for (auto& row : diff.rows) {
    if (!(row.kind == TensorKind::values || row.kind == TensorKind::logits)) continue;
    const auto it = by_key.find(row.key());
    if (it == by_key.end()) continue;
    row.measured_floor = MeasuredFloor{it->second->metrics.rel_l2, it->second->metrics.err_rel, out.label};
    ++out.rows;
  }
  return out;
}

}  // namespace tdiff
