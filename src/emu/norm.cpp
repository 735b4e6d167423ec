#include "emu/norm.h"

#include <cmath>

#include "emu/stage_call.h"

namespace tdiff::emu {

NormSpec norm_spec(const Numerics& num, bool stream_input) {
  return {fmt_of(stream_input ? num.stream : num.storage), fmt_of(num.norm_stats), fmt_of(num.storage)};
}

float rms_factor(const float* x, std::int64_t n, float eps, Fmt stats) {
  float lane[kLanes] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    float& a = lane[i % kLanes];
    a = arith::fma_fmt(x[i], x[i], a, stats);
  }
  for (std::int64_t width = kLanes / 2; width > 0; width /= 2)  // shuffle-down tree
    for (std::int64_t k = 0; k < width; ++k) lane[k] = arith::add_fmt(lane[k], lane[k + width], stats);
  const float mean = arith::round_fmt(lane[0] / static_cast<float>(n), stats);
  return arith::round_fmt(1.0f / std::sqrt(arith::add_fmt(mean, eps, stats)), stats);
}

void rms_norm(const float* x, std::int64_t rows, std::int64_t n, const float* g, float eps, Fmt stats, Fmt out,
              float* y) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float f = rms_factor(x + r * n, n, eps, stats);
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = x[r * n + i] * f;
      y[r * n + i] = arith::round_fmt(g ? g[i] * v : v, out);
    }
  }
}

namespace {

// rms_norm (weighted) and head_rms_norm (per head, no weight) over the last axis.
std::vector<Tensor> run_rms_norm(StageCall& k) {
  const Tensor& x = *k.in[0];
  const NormSpec spec = norm_spec(k.num, k.s.stream_input);
  std::vector<float> y(static_cast<std::size_t>(x.numel()));
  std::vector<float> g = k.s.kind == OpKind::rms_norm ? to_float(k.weight(0)) : std::vector<float>{};
  rms_norm(k.load(0, spec.in).data(), rows_of(x), x.dim(-1), g.empty() ? nullptr : g.data(), k.eps, spec.stats, spec.out,
           y.data());
  return {store(y, x.shape())};
}

}  // namespace

void register_norm(Handlers& h) { h.add({OpKind::rms_norm, OpKind::head_rms_norm}, run_rms_norm); }

}  // namespace tdiff::emu
