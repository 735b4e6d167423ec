#include "refcpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "refcpu/stage_call.h"

namespace tdiff::refcpu {

std::vector<double> rope_frequencies(const RopeTable& t, std::int64_t r) {
  const std::int64_t half = r / 2;
  std::vector<double> w(static_cast<std::size_t>(half));
  for (std::int64_t f = 0; f < half; ++f)
    w[static_cast<std::size_t>(f)] = 1.0 / std::pow(t.theta, static_cast<double>(2 * f) / static_cast<double>(r));
  if (!t.yarn) return w;
  // YaRN (NTK-by-parts): blend interpolated (ω/s) and extrapolated (ω) frequencies by a
  // linear ramp between the dimensions whose wavelength fits beta_fast / beta_slow turns.
  const double rd = static_cast<double>(r), L0 = t.original_max_position_embeddings;
  auto corr = [&](double nu) { return rd * std::log(L0 / (2 * std::numbers::pi * nu)) / (2 * std::log(t.theta)); };
  double lo = std::max(std::floor(corr(t.beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(t.beta_slow)), rd - 1);
  if (lo == hi) hi += 0.001;
  for (std::int64_t f = 0; f < half; ++f) {
    const double gamma = std::clamp((static_cast<double>(f) - lo) / (hi - lo), 0.0, 1.0);
    double& om = w[static_cast<std::size_t>(f)];
    om = (1 - gamma) * om + gamma * om / t.factor;
  }
  return w;
}

void rope_tables(const std::vector<double>& freq, const std::int64_t* positions, std::int64_t n, double* cos_out,
                 double* sin_out) {
  const auto half = static_cast<std::int64_t>(freq.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t f = 0; f < half; ++f) {
      const double phi = static_cast<double>(positions[i]) * freq[static_cast<std::size_t>(f)];
      cos_out[i * half + f] = std::cos(phi);
      sin_out[i * half + f] = std::sin(phi);
    }
}

void rope_rotate(const double* x, std::int64_t rows, std::int64_t width, std::int64_t r, const double* cos_t,
                 const double* sin_t, const std::int64_t* table_row, bool inverse, double* y) {
  const std::int64_t half = r / 2, dn = width - r;
  const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < rows; ++i) {
    const double* xi = x + i * width;
    double* yi = y + i * width;
    for (std::int64_t c = 0; c < dn; ++c) yi[c] = xi[c];
    const double* cs = cos_t + table_row[i] * half;
    const double* sn = sin_t + table_row[i] * half;
    for (std::int64_t f = 0; f < half; ++f) {
      const double a = xi[dn + 2 * f], b = xi[dn + 2 * f + 1];
      const double c = cs[f], s = sign * sn[f];
      yi[dn + 2 * f] = a * c - b * s;
      yi[dn + 2 * f + 1] = a * s + b * c;
    }
  }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_rope_table(StageCall& r) {
  const auto half = r.c.rope_dim / 2;
  Tensor cs(DType::f64, {r.B, r.S, half}), sn(DType::f64, {r.B, r.S, half});
  auto freq = rope_frequencies(r.s.compress_rope ? r.c.rope_compress : r.c.rope_main, r.c.rope_dim);
  rope_tables(freq, r.i64(0), r.N, cs.data<double>(), sn.data<double>());
  return {cs, sn};
}

// rope and rope_inverse: x [B,S,(heads,)width]; every head of token t uses table row t.
std::vector<Tensor> run_rope(StageCall& r) {
  const Tensor& x = *r.in[0];
  const std::int64_t rows = rows_of(x), per_token = rows / r.N;
  std::vector<std::int64_t> table_row(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) table_row[static_cast<std::size_t>(i)] = i / per_token;
  Tensor y(DType::f64, x.shape());
  rope_rotate(r.f64(0), rows, x.dim(-1), r.c.rope_dim, r.f64(1), r.f64(2), table_row.data(),
              r.s.kind == OpKind::rope_inverse, y.data<double>());
  return {y};
}

// Compressed entries [B, n, width]: entry w sits at position w·m, its own table.
std::vector<Tensor> run_entry_rope(StageCall& r) {
  const Tensor& x = *r.in[0];
  const auto n = x.dim(1), B = r.B;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n)), table_row(static_cast<std::size_t>(B * n));
  for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = (r.ctx.first_entry + w) * r.s.rate;
  for (std::int64_t i = 0; i < B * n; ++i) table_row[static_cast<std::size_t>(i)] = i % n;
  const auto half = r.c.rope_dim / 2;
  std::vector<double> cs(static_cast<std::size_t>(n * half)), sn(cs.size());
  rope_tables(rope_frequencies(r.c.rope_compress, r.c.rope_dim), positions.data(), n, cs.data(), sn.data());
  Tensor y(DType::f64, x.shape());
  rope_rotate(r.f64(0), B * n, x.dim(-1), r.c.rope_dim, cs.data(), sn.data(), table_row.data(), false,
              y.data<double>());
  return {y};
}

}  // namespace

void register_rope(Handlers& t) {
  t.add(OpKind::rope_table, run_rope_table);
  t.add({OpKind::rope, OpKind::rope_inverse}, run_rope);
  t.add(OpKind::entry_rope, run_entry_rope);
}

}  // namespace tdiff::refcpu
