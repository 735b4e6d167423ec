#include "refcpu/norm.h"

#include <cmath>

#include "refcpu/stage_call.h"

namespace tdiff::refcpu {

double inv_rms(const double* x, std::int64_t n, double eps) {
  double ss = 0;
  for (std::int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
}

void rms_norm(const double* x, std::int64_t rows, std::int64_t n, const double* g, double eps, double* y) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const double f = inv_rms(x + r * n, n, eps);
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] = g[i] * (x[r * n + i] * f);
  }
}

void rms_unweighted(const double* x, std::int64_t rows, std::int64_t n, double eps, double* y) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const double f = inv_rms(x + r * n, n, eps);
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * f;
  }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_rms_norm(StageCall& r) {
  const Tensor& x = *r.in[0];
  Tensor y(DType::f64, x.shape());
  rms_norm(r.f64(0), rows_of(x), x.dim(-1), r.weight(0).data<double>(), r.c.rms_norm_eps, y.data<double>());
  return {y};
}

std::vector<Tensor> run_head_rms_norm(StageCall& r) {
  const Tensor& x = *r.in[0];
  Tensor y(DType::f64, x.shape());
  rms_unweighted(r.f64(0), rows_of(x), x.dim(-1), r.c.rms_norm_eps, y.data<double>());
  return {y};
}

}  // namespace

void register_norm(Handlers& t) {
  t.add(OpKind::rms_norm, run_rms_norm);
  t.add(OpKind::head_rms_norm, run_head_rms_norm);
}

}  // namespace tdiff::refcpu
