#include "emu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tdiff::emu {

std::vector<float> rope_frequencies(const RopeTable& t, std::int64_t r) {
  const std::int64_t half = r / 2;
  std::vector<float> w(static_cast<std::size_t>(half));
  for (std::int64_t f = 0; f < half; ++f) {
    const float e = static_cast<float>(2 * f) / static_cast<float>(r);
    w[static_cast<std::size_t>(f)] = 1.0f / std::pow(static_cast<float>(t.theta), e);
  }
  if (!t.yarn) return w;
  const double rd = static_cast<double>(r), L0 = t.original_max_position_embeddings;
  auto corr = [&](double nu) { return rd * std::log(L0 / (2 * std::numbers::pi * nu)) / (2 * std::log(t.theta)); };
  double lo = std::max(std::floor(corr(t.beta_fast)), 0.0), hi = std::min(std::ceil(corr(t.beta_slow)), rd - 1);
  if (lo == hi) hi += 0.001;
  for (std::int64_t f = 0; f < half; ++f) {
    const float g = static_cast<float>(std::clamp((static_cast<double>(f) - lo) / (hi - lo), 0.0, 1.0));
    float& om = w[static_cast<std::size_t>(f)];
    om = (1 - g) * om + g * (om / static_cast<float>(t.factor));
  }
  return w;
}

namespace {
// Fast-math sine/cosine: reduce by a float32 2π (the reduction error grows with |x|).
float fast_reduce(float x) {
  constexpr float two_pi = 6.28318548f;
  return x - two_pi * std::nearbyint(x / two_pi);
}
}  // namespace

void rope_tables(const std::vector<float>& freq, const std::int64_t* positions, std::int64_t n, RopeAngle angle,
                 float* cos_out, float* sin_out) {
  const auto half = static_cast<std::int64_t>(freq.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t f = 0; f < half; ++f) {
      float phi = static_cast<float>(positions[i]) * freq[static_cast<std::size_t>(f)];
      if (angle == RopeAngle::bf16) phi = arith::round_bf16(phi);
      if (angle == RopeAngle::f16) phi = arith::round_f16(phi);
      if (angle == RopeAngle::fast) phi = fast_reduce(phi);
      cos_out[i * half + f] = std::cos(phi);
      sin_out[i * half + f] = std::sin(phi);
    }
}

void rope_rotate(const float* x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* cos_t,
                 const float* sin_t, const std::int64_t* table_row, bool inverse, Fmt out, float* y) {
  const std::int64_t half = r / 2, dn = width - r;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * width;
    float* yi = y + i * width;
    for (std::int64_t c = 0; c < dn; ++c) yi[c] = arith::round_fmt(xi[c], out);
    const float* cs = cos_t + table_row[i] * half;
    const float* sn = sin_t + table_row[i] * half;
    for (std::int64_t f = 0; f < half; ++f) {
      const float a = xi[dn + 2 * f], b = xi[dn + 2 * f + 1], c = cs[f], s = sign * sn[f];
      yi[dn + 2 * f] = arith::round_fmt(a * c - b * s, out);
      yi[dn + 2 * f + 1] = arith::round_fmt(a * s + b * c, out);
    }
  }
}

}  // namespace tdiff::emu
