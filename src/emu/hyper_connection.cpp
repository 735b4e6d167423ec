#include "emu/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "emu/norm.h"
#include "emu/stage_call.h"

namespace tdiff::emu {

HcSpec hc_spec(const Numerics& num) { return {fmt_of(num.sinkhorn), fmt_of(num.norm_stats), num.hc_eps}; }

namespace {
float sigmoid_fmt(float x, Fmt f) { return arith::round_fmt(1.0f / (1.0f + std::exp(-x)), f); }
}  // namespace

void hc_mix(const float* X, std::int64_t tokens, std::int64_t flat, const double* fn, std::int64_t M, float eps,
            const Numerics& num, float* mix) {
  const HcSpec spec = hc_spec(num);
  const Fmt sk = spec.sinkhorn, stats = spec.norm_stats;
  std::vector<float> w(static_cast<std::size_t>(M * flat));
  for (std::int64_t i = 0; i < M * flat; ++i) w[static_cast<std::size_t>(i)] = arith::round_fmt(static_cast<float>(fn[i]), sk);
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* x = X + t * flat;
    const float f = rms_factor(x, flat, eps, stats);
    std::vector<float> u(static_cast<std::size_t>(flat));
    for (std::int64_t c = 0; c < flat; ++c) u[static_cast<std::size_t>(c)] = arith::round_fmt(x[c] * f, sk);
    for (std::int64_t q = 0; q < M; ++q) {
      // A wavefront's order: lane k sums the terms c = k, k + 64, ... in float32, then the
      // lanes meet in emu's shuffle-down tree (as rms_factor). The kernel spreads one sum over
      // 64 lanes instead of one 16384-term chain per output (v4).
      const float* wq = w.data() + q * flat;
      float lane[kLanes] = {};
      const float* uc = u.data();
      for (std::int64_t c0 = 0; c0 < flat; c0 += kLanes) {  // lane k takes c0 + k: vectorises
        const std::int64_t n = std::min(kLanes, flat - c0);
        for (std::int64_t k = 0; k < n; ++k) lane[k] = arith::add_rn(lane[k], arith::mul_rn(uc[c0 + k], wq[c0 + k]));
      }
      for (std::int64_t width = kLanes / 2; width > 0; width /= 2)
        for (std::int64_t k = 0; k < width; ++k) lane[k] = arith::add_rn(lane[k], lane[k + width]);
      mix[t * M + q] = arith::round_fmt(lane[0], sk);
    }
  }
}

void hc_sinkhorn(const float* mix, std::int64_t tokens, std::int64_t n, const double* base, const double* scale,
                 float hc_eps, std::int64_t iters, const Numerics& num, float* pre, float* post, float* comb) {
  const HcSpec spec = hc_spec(num);
  const Fmt f = spec.sinkhorn;
  const float eps = spec.eps(hc_eps);
  const std::int64_t M = (2 + n) * n;
  auto sc = [&](int i) { return arith::round_fmt(static_cast<float>(scale[i]), f); };
  auto bs = [&](std::int64_t i) { return arith::round_fmt(static_cast<float>(base[i]), f); };
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* m = mix + t * M;
    for (std::int64_t s = 0; s < n; ++s) {
      pre[t * n + s] = arith::add_fmt(sigmoid_fmt(arith::add_fmt(arith::mul_fmt(m[s], sc(0), f), bs(s), f), f), eps, f);
      post[t * n + s] = arith::mul_fmt(2.0f, sigmoid_fmt(arith::add_fmt(arith::mul_fmt(m[n + s], sc(1), f), bs(n + s), f), f), f);
    }
    float* P = comb + t * n * n;
    for (std::int64_t a = 0; a < n; ++a) {
      float* row = P + a * n;
      float mx = -INFINITY;
      for (std::int64_t k = 0; k < n; ++k) {
        row[k] = arith::add_fmt(arith::mul_fmt(m[2 * n + a * n + k], sc(2), f), bs(2 * n + a * n + k), f);
        mx = std::max(mx, row[k]);
      }
      float z = 0;
      for (std::int64_t k = 0; k < n; ++k) z = arith::add_fmt(z, row[k] = arith::round_fmt(std::exp(row[k] - mx), f), f);
      for (std::int64_t k = 0; k < n; ++k) row[k] = arith::add_fmt(arith::round_fmt(row[k] / z, f), eps, f);
    }
    auto normalise = [&](bool columns) {
      for (std::int64_t u = 0; u < n; ++u) {
        float s = 0;
        for (std::int64_t v = 0; v < n; ++v) s = arith::add_fmt(s, columns ? P[v * n + u] : P[u * n + v], f);
        const float den = arith::add_fmt(s, eps, f);
        for (std::int64_t v = 0; v < n; ++v) {
          float& e = columns ? P[v * n + u] : P[u * n + v];
          e = arith::round_fmt(e / den, f);
        }
      }
    };
    normalise(true);
    for (std::int64_t it = 1; it < iters; ++it) {
      normalise(false);
      normalise(true);
    }
  }
}

void hc_collapse(const float* X, const float* w, std::int64_t tokens, std::int64_t n, std::int64_t D, Fmt out, float* x) {
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t c = 0; c < D; ++c) {
      float acc = 0;
      for (std::int64_t s = 0; s < n; ++s) acc += w[t * n + s] * X[(t * n + s) * D + c];
      x[t * D + c] = arith::round_fmt(acc, out);
    }
}

void hc_post(const float* X, const float* y, const float* post, const float* comb, std::int64_t tokens, std::int64_t n,
             std::int64_t D, Fmt out, float* Xout) {
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t c = 0; c < D; ++c) {
        float acc = 0;
        for (std::int64_t a = 0; a < n; ++a) acc += comb[(t * n + a) * n + k] * X[(t * n + a) * D + c];
        Xout[(t * n + k) * D + c] = arith::round_fmt(post[t * n + k] * y[t * D + c] + acc, out);
      }
}

void hc_head_weights(const float* X, std::int64_t tokens, std::int64_t n, std::int64_t D, const double* fn,
                     const double* base, const double* scale, float eps, float hc_eps, const Numerics& num, float* preh) {
  const HcSpec spec = hc_spec(num);
  const Fmt f = spec.sinkhorn;
  const float e = spec.eps(hc_eps);
  std::vector<float> mix(static_cast<std::size_t>(tokens * n));
  hc_mix(X, tokens, n * D, fn, n, eps, num, mix.data());
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t s = 0; s < n; ++s) {
      const float z = arith::add_fmt(arith::mul_fmt(mix[static_cast<std::size_t>(t * n + s)], static_cast<float>(scale[0]), f),
                                     static_cast<float>(base[s]), f);
      preh[t * n + s] = arith::add_fmt(sigmoid_fmt(z, f), e, f);
    }
}

namespace {

// Copies of the (already stored) embedding, in the stream format.
std::vector<Tensor> run_hc_expand(StageCall& k) {
  auto out = k.refcpu_outputs();
  for (double& v : out[0].span<double>()) v = arith::round_fmt(arith::round_fmt(static_cast<float>(v), k.st), k.sf);
  return out;
}

std::vector<Tensor> run_hc_mix(StageCall& k) {
  const auto M = k.c.hc_mix_width(), flat = k.c.hc_mult * k.c.hidden_size;
  std::vector<float> mix(static_cast<std::size_t>(k.N * M));
  hc_mix(k.load(0, k.sf).data(), k.N, flat, k.weight(0).data<double>(), M, k.eps, k.num, mix.data());
  return {store(mix, {k.B, k.S, M})};
}

std::vector<Tensor> run_hc_sinkhorn(StageCall& k) {
  const auto n = k.c.hc_mult, B = k.B, S = k.S;
  std::vector<float> pre(static_cast<std::size_t>(k.N * n)), post(pre.size()), comb(static_cast<std::size_t>(k.N * n * n));
  hc_sinkhorn(k.load_f32(0).data(), k.N, n, k.weight(0).data<double>(), k.weight(1).data<double>(),
              static_cast<float>(k.c.hc_eps), k.c.hc_sinkhorn_iters, k.num, pre.data(), post.data(), comb.data());
  return {store(pre, {B, S, n}), store(post, {B, S, n}), store(comb, {B, S, n, n})};
}

// The collapse is cast to the stream dtype (model-spec §3.7), not to the activation storage.
std::vector<Tensor> run_hc_pre(StageCall& k) {
  std::vector<float> x(static_cast<std::size_t>(k.N * k.c.hidden_size));
  hc_collapse(k.load(0, k.sf).data(), k.load_f32(1).data(), k.N, k.c.hc_mult, k.c.hidden_size, k.sf, x.data());
  return {store(x, {k.B, k.S, k.c.hidden_size})};
}

std::vector<Tensor> run_hc_post(StageCall& k) {
  std::vector<float> X(static_cast<std::size_t>(k.in[0]->numel()));
  hc_post(k.load(0, k.sf).data(), k.load(1, k.st).data(), k.load_f32(2).data(), k.load_f32(3).data(), k.N,
          k.c.hc_mult, k.c.hidden_size, k.sf, X.data());
  return {store(X, k.in[0]->shape())};
}

std::vector<Tensor> run_hc_head(StageCall& k) {
  const auto n = k.c.hc_mult, D = k.c.hidden_size, N = k.N;
  auto X = k.load(0, k.sf);
  std::vector<float> preh(static_cast<std::size_t>(N * n)), y(static_cast<std::size_t>(N * D));
  hc_head_weights(X.data(), N, n, D, k.weight(0).data<double>(), k.weight(1).data<double>(), k.weight(2).data<double>(),
                  k.eps, static_cast<float>(k.c.hc_eps), k.num, preh.data());
  hc_collapse(X.data(), preh.data(), N, n, D, k.sf, y.data());
  return {store(y, {k.B, k.S, D}), store(preh, {k.B, k.S, n})};
}

}  // namespace

void register_hyper_connection(Handlers& h) {
  h.add(OpKind::hc_expand, run_hc_expand);
  h.add(OpKind::hc_mix, run_hc_mix);
  h.add(OpKind::hc_sinkhorn, run_hc_sinkhorn);
  h.add(OpKind::hc_pre, run_hc_pre);
  h.add(OpKind::hc_post, run_hc_post);
  h.add(OpKind::hc_head, run_hc_head);
}

}  // namespace tdiff::emu
