#include "refcpu/attention.h"

#include <cmath>
#include <vector>

#include "refcpu/handlers.h"

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

namespace tdiff::refcpu {

namespace {

// q [B, S, H, d], kv [B, S, d], window mask [B, S, S] (, C [B, n, d], cmp mask [B, S, n]),
// the sinks as weight 0 -> o [B, S, H, d], one batch row at a time.
std::vector<Tensor> run_attention(RefCall& r) {
  const std::int64_t S = r.S;
  const auto H = r.c.num_attention_heads, d = r.c.head_dim;
  Tensor o(DType::f64, {r.B, S, H, d});
  const bool compressed = r.in.size() > 3;
  const auto n = compressed ? r.in[3]->dim(1) : 0;
  for (std::int64_t b = 0; b < r.B; ++b)
    attention_row(r.f64(0) + b * S * H * d, r.f64(1) + b * S * d, r.u8(2) + b * S * S,
                  compressed ? r.f64(3) + b * n * d : nullptr, compressed ? r.u8(4) + b * S * n : nullptr, S, n, H, d,
                  r.weight(0).data<double>(), o.data<double>() + b * S * H * d);
  return {o};
}

}  // namespace

void register_attention(RefHandlers& t) { t.add(OpKind::attention, run_attention); }

}  // namespace tdiff::refcpu
