// The norm family on the device: rms_norm, head_rms_norm (hip/norm.h; knobs: emu::norm_spec).
#include "emu/norm.h"
#include "hip/norm.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

std::vector<Tensor> run_rms_norm(StageCall& k) {
  const Shape sh = k.shape(0);
  const emu::NormSpec spec = emu::norm_spec(k.num, k.s.stream_input);
  auto y = k.out(sh, spec.out);
  rms_norm(k.load(0, spec.in), rows_of(sh), sh.back(), k.s.kind == OpKind::rms_norm ? k.weight(0) : nullptr, k.eps,
           spec.stats, spec.out, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

}  // namespace

void register_norm(Handlers& h) { h.add({OpKind::rms_norm, OpKind::head_rms_norm}, run_rms_norm); }

}  // namespace tdiff::hip
