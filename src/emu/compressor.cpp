#include "emu/compressor.h"

#include <cmath>
#include <vector>

#include "emu/numerics.h"

namespace tdiff::emu {

void gated_pool(const float* P, const float* Z, std::int64_t len, const double* pb, std::int64_t rate,
                std::int64_t width, bool overlap, const Numerics& num, float* out) {
  const Fmt sm = fmt_of(num.pool_softmax), st = fmt_of(num.storage);
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

}  // namespace tdiff::emu
