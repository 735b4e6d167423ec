#include "refcpu/hyper_connection.h"

#include <cmath>
#include <vector>

#include "refcpu/linear.h"
#include "refcpu/norm.h"

namespace tdiff::refcpu {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void hc_mix(const double* X, std::int64_t tokens, std::int64_t flat, const double* fn, std::int64_t M, double eps,
            double* mix) {
  std::vector<double> u(static_cast<std::size_t>(tokens * flat));
  rms_unweighted(X, tokens, flat, eps, u.data());
  linear(u.data(), tokens, flat, fn, M, mix);
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
