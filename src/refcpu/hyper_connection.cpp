#include "refcpu/hyper_connection.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "refcpu/stage_call.h"
#include "refcpu/linear.h"
#include "refcpu/norm.h"

namespace tdiff::refcpu {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void hc_mix(const double* X, std::int64_t tokens, std::int64_t flat, const double* fn, std::int64_t M, double eps,
            double* mix) {
  // u = X/RMS(X) then fn · u, u made a row chunk at a time (linear_scaled_rows): the bits of
  // rms_unweighted then linear.
  std::vector<double> f(static_cast<std::size_t>(tokens));
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) f[static_cast<std::size_t>(t)] = inv_rms(X + t * flat, flat, eps);
  linear_scaled_rows(X, f.data(), tokens, flat, fn, M, mix);
}

void hc_sinkhorn(const double* mix, std::int64_t tokens, std::int64_t n, const double* base, const double* scale,
                 double hc_eps, std::int64_t iters, double* pre, double* post, double* comb) {
  const std::int64_t M = (2 + n) * n;
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* m = mix + t * M;
    for (std::int64_t s = 0; s < n; ++s) {
      pre[t * n + s] = sigmoid(m[s] * scale[0] + base[s]) + hc_eps;
      post[t * n + s] = 2.0 * sigmoid(m[n + s] * scale[1] + base[n + s]);
    }
    double* P = comb + t * n * n;
    for (std::int64_t a = 0; a < n; ++a) {  // row softmax over k, then + ε
      double* row = P + a * n;
      double mx = -INFINITY;
      for (std::int64_t k = 0; k < n; ++k) {
        row[k] = m[2 * n + a * n + k] * scale[2] + base[2 * n + a * n + k];
        mx = std::max(mx, row[k]);
      }
      double z = 0;
      for (std::int64_t k = 0; k < n; ++k) z += (row[k] = std::exp(row[k] - mx));
      for (std::int64_t k = 0; k < n; ++k) row[k] = row[k] / z + hc_eps;
    }
    auto column_step = [&] {
      for (std::int64_t k = 0; k < n; ++k) {
        double s = 0;
        for (std::int64_t a = 0; a < n; ++a) s += P[a * n + k];
        for (std::int64_t a = 0; a < n; ++a) P[a * n + k] /= s + hc_eps;
      }
    };
    auto row_step = [&] {
      for (std::int64_t a = 0; a < n; ++a) {
        double s = 0;
        for (std::int64_t k = 0; k < n; ++k) s += P[a * n + k];
        for (std::int64_t k = 0; k < n; ++k) P[a * n + k] /= s + hc_eps;
      }
    };
    column_step();
    for (std::int64_t it = 1; it < iters; ++it) {
      row_step();
      column_step();
    }
  }
}

void hc_collapse(const double* X, const double* w, std::int64_t tokens, std::int64_t n, std::int64_t D, double* x) {
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t c = 0; c < D; ++c) {
      double acc = 0;
      for (std::int64_t s = 0; s < n; ++s) acc += w[t * n + s] * X[(t * n + s) * D + c];
      x[t * D + c] = acc;
    }
}

void hc_post(const double* X, const double* y, const double* post, const double* comb, std::int64_t tokens,
             std::int64_t n, std::int64_t D, double* out) {
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t c = 0; c < D; ++c) {
        double acc = 0;
        for (std::int64_t a = 0; a < n; ++a) acc += comb[(t * n + a) * n + k] * X[(t * n + a) * D + c];
        out[(t * n + k) * D + c] = post[t * n + k] * y[t * D + c] + acc;
      }
}

void hc_head_weights(const double* X, std::int64_t tokens, std::int64_t n, std::int64_t D, const double* fn,
                     const double* base, const double* scale, double eps, double hc_eps, double* preh) {
  std::vector<double> mix(static_cast<std::size_t>(tokens * n));
  hc_mix(X, tokens, n * D, fn, n, eps, mix.data());
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t s = 0; s < n; ++s)
      preh[t * n + s] = sigmoid(mix[static_cast<std::size_t>(t * n + s)] * scale[0] + base[s]) + hc_eps;
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_hc_expand(StageCall& r) {
  const auto D = r.c.hidden_size, n = r.c.hc_mult;
  Tensor X(DType::f64, {r.B, r.S, n, D});
  const double* e = r.f64(0);
  for (std::int64_t t = 0; t < r.N; ++t)
    for (std::int64_t k = 0; k < n; ++k)
      std::memcpy(X.data<double>() + (t * n + k) * D, e + t * D, static_cast<std::size_t>(D) * 8);
  return {X};
}

std::vector<Tensor> run_hc_mix(StageCall& r) {
  const Tensor& fn = r.weight(0);
  const auto M = r.c.hc_mix_width(), flat = r.c.hc_mult * r.c.hidden_size;
  Tensor mix(DType::f64, {r.B, r.S, M});
  hc_mix(r.f64(0), r.N, flat, fn.data<double>(), M, r.c.rms_norm_eps, mix.data<double>());
  return {mix};
}

std::vector<Tensor> run_hc_sinkhorn(StageCall& r) {
  const auto n = r.c.hc_mult;
  Tensor pre(DType::f64, {r.B, r.S, n}), post(DType::f64, {r.B, r.S, n}), comb(DType::f64, {r.B, r.S, n, n});
  hc_sinkhorn(r.f64(0), r.N, n, r.weight(0).data<double>(), r.weight(1).data<double>(), r.c.hc_eps,
              r.c.hc_sinkhorn_iters, pre.data<double>(), post.data<double>(), comb.data<double>());
  return {pre, post, comb};
}

std::vector<Tensor> run_hc_pre(StageCall& r) {
  Tensor x(DType::f64, {r.B, r.S, r.c.hidden_size});
  hc_collapse(r.f64(0), r.f64(1), r.N, r.c.hc_mult, r.c.hidden_size, x.data<double>());
  return {x};
}

std::vector<Tensor> run_hc_post(StageCall& r) {
  Tensor X(DType::f64, r.in[0]->shape());
  hc_post(r.f64(0), r.f64(1), r.f64(2), r.f64(3), r.N, r.c.hc_mult, r.c.hidden_size, X.data<double>());
  return {X};
}

std::vector<Tensor> run_hc_head(StageCall& r) {
  const auto n = r.c.hc_mult, D = r.c.hidden_size;
  Tensor y(DType::f64, {r.B, r.S, D}), preh(DType::f64, {r.B, r.S, n});
  hc_head_weights(r.f64(0), r.N, n, D, r.weight(0).data<double>(), r.weight(1).data<double>(),
                  r.weight(2).data<double>(), r.c.rms_norm_eps, r.c.hc_eps, preh.data<double>());
  hc_collapse(r.f64(0), preh.data<double>(), r.N, n, D, y.data<double>());
  return {y, preh};
}

}  // namespace

void register_hyper_connection(Handlers& t) {
  t.add(OpKind::hc_expand, run_hc_expand);
  t.add(OpKind::hc_mix, run_hc_mix);
  t.add(OpKind::hc_sinkhorn, run_hc_sinkhorn);
  t.add(OpKind::hc_pre, run_hc_pre);
  t.add(OpKind::hc_post, run_hc_post);
  t.add(OpKind::hc_head, run_hc_head);
}

}  // namespace tdiff::refcpu
