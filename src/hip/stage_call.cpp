#include "hip/stage_call.h"

#include <fmt/format.h>

#include "emu/numerics.h"
#include "hip/elementwise.h"

namespace tdiff::hip {

using arith::Fmt;

StageCall::StageCall(HipBackend& be, const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx)
    : StageFacts(be.policy_, be.run_seed_, s, in, ctx), be(be), cs(be.compute_) {}

const float* StageCall::load(std::size_t i, Fmt fmt) {
  const DevTensor& d = dev(i);
  if (d.dtype != DType::f32) throw std::logic_error(fmt::format("hip: stage {}: input {} is not a float tensor", s.name, i));
  if (fmt == Fmt::f32 || d.fmt == fmt) return d.f();
  float* out = scratch(d.numel());
  round_to(d.f(), d.numel(), fmt, out, cs);
  return out;
}

StageCall::DevTensor StageCall::out(Shape shape, Fmt fmt, DType dtype) {
  DevTensor d;
  d.shape = std::move(shape);
  d.dtype = dtype;
  d.fmt = fmt;
  d.buf = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(d.numel(), 1)) * dtype_size(dtype), &be.pool_);
  return d;
}

GemmSpec StageCall::device_spec(const emu::GemmSpec& spec) const {
  return GemmSpec{spec.in, spec.acc, spec.out, spec.atomic, be.matrix_cores_};
}

GemmSpec StageCall::exact_sgemm(GemmSpec spec, Fmt x_fmt, std::size_t weight) {
  if (spec.in == Fmt::f32 && spec.acc == Fmt::f32 && spec.matrix_cores && !spec.atomic && x_fmt == Fmt::bf16 &&
      be.weight_is_bf16(ctx.weights, s.weights.at(weight)))
    spec.in = Fmt::bf16;
  return spec;
}

GemmInput StageCall::operand(const float* x, std::int64_t rows, std::int64_t K, const GemmSpec& spec, std::int64_t segment) {
  if (runs_on_matrix_cores(spec)) {
    auto* q = scratch_of<std::uint16_t>(rows * K);
    quantize_activations_bits16(x, q, rows * K, spec.in, cs);
    return GemmInput(q);
  }
  if (spec.in == Fmt::f32) return x;
  float* q = scratch(rows * K);
  quantize_activations(x, q, rows, K, segment, spec.in, cs);
  return q;
}

void StageCall::emit(DevTensor t) { outs_.push_back(be.publish(s, outs_.size(), std::move(t))); }

void StageCall::emit_copied(DevTensor t, const HipBackend::EarlyCopy& early) {
  outs_.push_back(be.publish(s, outs_.size(), std::move(t), &early));
}

}  // namespace tdiff::hip
