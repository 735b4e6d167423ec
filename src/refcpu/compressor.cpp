#include "refcpu/compressor.h"

#include <cmath>
#include <vector>

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
