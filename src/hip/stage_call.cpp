#include "hip/stage_call.h"

#include <algorithm>

#include <fmt/format.h>

#include "emu/numerics.h"
#include "hip/collective.h"
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

std::shared_ptr<DeviceBuffer> StageCall::rank_partials(int ranks, std::int64_t n) {
  return std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(ranks * n, 1)) * sizeof(float), &be.pool_);
}

void StageCall::all_reduce(const float* d_partials, int ranks, std::int64_t n, float* d_out) {
  reduce_ranks(d_partials, ranks, n, emu::ReduceSpec{split.allreduce, st, split.channels}, d_out, cs);
}

void StageCall::keep_or_reduce(std::shared_ptr<DeviceBuffer> partials, int ranks, Shape shape) {
  const std::int64_t n = shape_numel(shape);
  if (split.moe_reduce == MoeReduce::reduce_each) {
    auto y = out(std::move(shape), st);
    all_reduce(partials->as<float>(), ranks, n, y.f());
    emit(std::move(y));
    return;
  }
  // The float64 sum in rank order, as emu forms it, on the host (a simulation: the partials'
  // copy and the wait cost time, not bits).
  std::vector<float> host(static_cast<std::size_t>(ranks * n));
  copy_d2h(host.data(), partials->get(), host.size() * sizeof(float), cs);
  stream_sync(cs);
  Tensor sum(DType::f64, std::move(shape));
  double* d = sum.data<double>();
  std::fill_n(d, n, 0.0);
  for (int r = 0; r < ranks; ++r)
    for (std::int64_t i = 0; i < n; ++i) d[i] += host[static_cast<std::size_t>(r * n + i)];
  const std::string key = s.name + "/" + s.outputs.at(outs_.size());
  be.partials_[key] = HipBackend::KeptPartials{std::move(partials), ranks, n, sum};
  DevTensor t = be.upload(sum);
  t.host = sum;
  be.remember(key, std::move(t));
  outs_.push_back(sum);
}

std::optional<HipBackend::KeptPartials> StageCall::take_partials(std::size_t i) {
  auto it = be.partials_.find(s.inputs.at(i).key());
  if (it == be.partials_.end()) return std::nullopt;
  HipBackend::KeptPartials p = std::move(it->second);
  be.partials_.erase(it);
  if (in.at(i)->raw() != p.sum.raw()) return std::nullopt;
  return p;
}

}  // namespace tdiff::hip
