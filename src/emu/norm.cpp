#include "emu/norm.h"

#include <cmath>

namespace tdiff::emu {

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

}  // namespace tdiff::emu
