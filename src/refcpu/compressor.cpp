#include "refcpu/compressor.h"

#include <cmath>
#include <vector>

#include "refcpu/stage_call.h"
#include "refcpu/linear.h"

namespace tdiff::refcpu {

void gated_pool(const double* P, const double* Z, std::int64_t len, const double* pb, std::int64_t rate,
                std::int64_t width, bool overlap, double* out) {
  const std::int64_t c = overlap ? 2 : 1, stride = c * width, n = len / rate;
#pragma omp parallel for schedule(static)
  for (std::int64_t w = 0; w < n; ++w) {
    std::vector<double> logit(static_cast<std::size_t>(2 * rate)), value(static_cast<std::size_t>(2 * rate));
    for (std::int64_t ch = 0; ch < width; ++ch) {
      std::int64_t slots = 0;
      if (overlap && w > 0)  // A half of the previous window; for w = 0 these slots weigh exactly 0
        for (std::int64_t j = 0; j < rate; ++j, ++slots) {
          const std::int64_t t = (w - 1) * rate + j;
          logit[slots] = Z[t * stride + ch] + pb[j * stride + ch];
          value[slots] = P[t * stride + ch];
        }
      const std::int64_t own = overlap ? width : 0;  // B half for CSA, the only half for HCA
      for (std::int64_t j = 0; j < rate; ++j, ++slots) {
        const std::int64_t t = w * rate + j;
        logit[slots] = Z[t * stride + own + ch] + pb[j * stride + own + ch];
        value[slots] = P[t * stride + own + ch];
      }
      double mx = -INFINITY;
      for (std::int64_t s = 0; s < slots; ++s) mx = std::max(mx, logit[s]);
      double z = 0;
      for (std::int64_t s = 0; s < slots; ++s) z += (logit[s] = std::exp(logit[s] - mx));
      double acc = 0;
      for (std::int64_t s = 0; s < slots; ++s) acc += (logit[s] / z) * value[s];
      out[w * width + ch] = acc;
    }
  }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

// h [B, S, D] -> P = h·Wpᵀ, Z = h·Wzᵀ (the pooled values and their gate logits).
std::vector<Tensor> run_cmp_proj(StageCall& r) {
  const Tensor& h = *r.in[0];
  const Tensor &wp = r.weight(0), &wz = r.weight(1);
  Tensor P(DType::f64, with_last(h.shape(), wp.dim(0))), Z(DType::f64, with_last(h.shape(), wz.dim(0)));
  linear(r.f64(0), r.N, h.dim(-1), wp.data<double>(), wp.dim(0), P.data<double>());
  linear(r.f64(0), r.N, h.dim(-1), wz.data<double>(), wz.dim(0), Z.data<double>());
  return {P, Z};
}

std::vector<Tensor> run_pool(StageCall& r) {
  const std::int64_t S = r.S, rate = r.s.rate;
  const auto n = S / rate, width = r.s.width, stride = r.in[0]->dim(-1);
  Tensor out(DType::f64, {r.B, n, width});
  for (std::int64_t b = 0; b < r.B; ++b) {
    const std::int64_t off = (b * S + r.batch.start[static_cast<std::size_t>(b)]) * stride;
    gated_pool(r.f64(0) + off, r.f64(1) + off, r.batch.length[static_cast<std::size_t>(b)], r.weight(0).data<double>(),
               rate, width, r.s.overlap, out.data<double>() + b * n * width);
  }
  return {out};
}

}  // namespace

void register_compressor(Handlers& t) {
  t.add(OpKind::cmp_proj, run_cmp_proj);
  t.add(OpKind::pool, run_pool);
}

}  // namespace tdiff::refcpu
