#include "refcpu/attention.h"

#include <cmath>
#include <vector>

namespace tdiff::refcpu {

void attention_row(const double* q, const double* kv, const std::uint8_t* win, const double* C,
                   const std::uint8_t* cmask, std::int64_t S, std::int64_t n, std::int64_t H, std::int64_t d,
                   const double* sinks, double* o) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    // Visible keys in a fixed order: raw keys ascending, then compressed entries ascending.
    std::vector<const double*> keys;
    for (std::int64_t j = 0; j < S; ++j)
      if (win[i * S + j]) keys.push_back(kv + j * d);
    for (std::int64_t w = 0; w < n; ++w)
      if (cmask[i * n + w]) keys.push_back(C + w * d);
    std::vector<double> p(keys.size());
    for (std::int64_t h = 0; h < H; ++h) {
      const double* qh = q + (i * H + h) * d;
      double* oh = o + (i * H + h) * d;
      double mx = sinks[h];
      for (std::size_t k = 0; k < keys.size(); ++k) {
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += qh[c] * keys[k][c];
        p[k] = dot * scale;
        mx = std::max(mx, p[k]);
      }
      double z = 0;
      for (std::size_t k = 0; k < keys.size(); ++k) z += (p[k] = std::exp(p[k] - mx));
      z += std::exp(sinks[h] - mx);
      for (std::int64_t c = 0; c < d; ++c) oh[c] = 0;
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const double pk = p[k] / z;
        for (std::int64_t c = 0; c < d; ++c) oh[c] += pk * keys[k][c];
      }
    }
  }
}

}  // namespace tdiff::refcpu
