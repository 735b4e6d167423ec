#include "emu/compressor.h"

#include <cmath>
#include <vector>

#include "emu/linear.h"
#include "emu/stage_call.h"

namespace tdiff::emu {

PoolSpec pool_spec(const Numerics& num) { return {fmt_of(num.pool_softmax), fmt_of(num.storage)}; }

void gated_pool(const float* P, const float* Z, std::int64_t len, const double* pb, std::int64_t rate,
                std::int64_t width, bool overlap, const Numerics& num, float* out) {
  const PoolSpec spec = pool_spec(num);
  const Fmt sm = spec.softmax, st = spec.st;
  const std::int64_t c = overlap ? 2 : 1, stride = c * width, n = len / rate;
#pragma omp parallel for schedule(static)
  for (std::int64_t w = 0; w < n; ++w) {
    std::vector<float> logit(static_cast<std::size_t>(2 * rate)), value(logit.size());
    for (std::int64_t ch = 0; ch < width; ++ch) {
      std::int64_t slots = 0;
      auto slot = [&](std::int64_t t, std::int64_t j, std::int64_t col) {
        logit[static_cast<std::size_t>(slots)] = arith::add_fmt(Z[t * stride + col], static_cast<float>(pb[j * stride + col]), sm);
        value[static_cast<std::size_t>(slots)] = P[t * stride + col];
        ++slots;
      };
      if (overlap && w > 0)
        for (std::int64_t j = 0; j < rate; ++j) slot((w - 1) * rate + j, j, ch);
      for (std::int64_t j = 0; j < rate; ++j) slot(w * rate + j, j, (overlap ? width : 0) + ch);
      float mx = -INFINITY;
      for (std::int64_t s = 0; s < slots; ++s) mx = std::max(mx, logit[static_cast<std::size_t>(s)]);
      float z = 0;
      for (std::int64_t s = 0; s < slots; ++s) {
        float& e = logit[static_cast<std::size_t>(s)];
        e = arith::round_fmt(std::exp(arith::add_fmt(e, -mx, sm)), sm);
        z = arith::add_fmt(z, e, sm);
      }
      float acc = 0;
      for (std::int64_t s = 0; s < slots; ++s)
        acc += arith::round_fmt(arith::round_fmt(logit[static_cast<std::size_t>(s)] / z, sm), st) * value[static_cast<std::size_t>(s)];
      out[w * width + ch] = arith::round_fmt(acc, st);
    }
  }
}

namespace {

// h -> P, Z: two projections of the same stored operand.
std::vector<Tensor> run_cmp_proj(StageCall& k) {
  const auto K = k.c.hidden_size, N = k.N;
  const GemmSpec spec = matmul_spec(k.num, k.st, k.seed);
  const auto x = operand(k.load(0, k.st), N, K, spec.in);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < 2; ++i) {
    const auto O = k.weight(i).dim(0);
    std::vector<float> y(static_cast<std::size_t>(N * O));
    gemm(x.data(), N, K, k.gemm_weight(i, spec.in).data(), O, spec, y.data());
    out.push_back(store(y, {k.B, k.S, O}));
  }
  return out;
}

// Every row's windows from its first real token; windows past the row's length stay 0.
std::vector<Tensor> run_pool(StageCall& k) {
  const auto B = k.B, S = k.S, n = S / k.s.rate, width = k.s.width, stride = k.in[0]->dim(-1);
  const PoolSpec spec = pool_spec(k.num);
  auto P = k.load(0, spec.st), Z = k.load(1, spec.st);
  std::vector<float> out(static_cast<std::size_t>(B * n * width), 0.0f);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t off = (b * S + k.batch.start[static_cast<std::size_t>(b)]) * stride;
    gated_pool(P.data() + off, Z.data() + off, k.batch.length[static_cast<std::size_t>(b)], k.weight(0).data<double>(),
               k.s.rate, width, k.s.overlap, k.num, out.data() + b * n * width);
  }
  return {store(out, {B, n, width})};
}

}  // namespace

void register_compressor(Handlers& h) {
  h.add(OpKind::cmp_proj, run_cmp_proj);
  h.add(OpKind::pool, run_pool);
}

}  // namespace tdiff::emu
