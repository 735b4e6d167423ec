#include "refcpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "refcpu/stage_call.h"
#include "refcpu/linear.h"

namespace tdiff::refcpu {

std::int64_t gather_keys(std::int64_t i, const double* kv, const std::uint8_t* win, const double* C,
                         const std::uint8_t* cmask, std::int64_t S, std::int64_t n, std::int64_t d,
                         std::vector<double>& keys) {
  keys.clear();
  for (std::int64_t j = 0; j < S; ++j)
    if (win[i * S + j]) keys.insert(keys.end(), kv + j * d, kv + (j + 1) * d);
  for (std::int64_t w = 0; w < n; ++w)
    if (cmask[i * n + w]) keys.insert(keys.end(), C + w * d, C + (w + 1) * d);
  return static_cast<std::int64_t>(keys.size()) / d;
}

void attention_probs(const double* q_i, const double* keys, std::int64_t nk, std::int64_t H, std::int64_t d,
                     const double* sinks, double* logits, double* probs, double* sink_p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  gemm_serial(H, nk, d, q_i, d, keys, d, true, logits, nk);  // q_h · K[k]
  for (std::int64_t h = 0; h < H; ++h) {
    double* l = logits + h * nk;
    double* p = probs + h * nk;
    double mx = sinks[h];
    for (std::int64_t k = 0; k < nk; ++k) mx = std::max(mx, l[k] = l[k] * scale);
    double z = 0;
    for (std::int64_t k = 0; k < nk; ++k) z += (p[k] = std::exp(l[k] - mx));
    const double e_sink = std::exp(sinks[h] - mx);
    z += e_sink;
    for (std::int64_t k = 0; k < nk; ++k) p[k] /= z;
    if (sink_p) sink_p[h] = e_sink / z;
  }
}

void attention_row(const double* q, const double* kv, const std::uint8_t* win, const double* C,
                   const std::uint8_t* cmask, std::int64_t S, std::int64_t Sk, std::int64_t n, std::int64_t H,
                   std::int64_t d, const double* sinks, double* o) {
  // Per query token, two DGEMMs over its own visible keys (all heads at once): the shapes
  // depend only on that token, so its bits do not depend on the thread count or the padding.
#pragma omp parallel
  {
    std::vector<double> keys, logits, probs;
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t i = 0; i < S; ++i) {
      const std::int64_t nk = gather_keys(i, kv, win, C, cmask, Sk, n, d, keys);
      double* oi = o + i * H * d;
      if (nk == 0) {  // only the sink: o = 0
        std::fill_n(oi, H * d, 0.0);
        continue;
      }
      logits.resize(static_cast<std::size_t>(H * nk));
      probs.resize(static_cast<std::size_t>(H * nk));
      attention_probs(q + i * H * d, keys.data(), nk, H, d, sinks, logits.data(), probs.data(), nullptr);
      gemm_serial(H, d, nk, probs.data(), nk, keys.data(), d, false, oi, d);  // Σ_k p[h,k] · K[k]
    }
  }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

// q [B, S, H, d], kv [B, Sk, d], window mask [B, S, Sk] (, C [B, n, d], cmp mask [B, S, n]),
// the sinks as weight 0 -> o [B, S, H, d], one batch row at a time. Sk = S in a prefill; a
// generation step's keys are the cache's window (exec/generation_cache.h).
std::vector<Tensor> run_attention(StageCall& r) {
  const std::int64_t S = r.S, Sk = r.in[1]->dim(1);
  const auto H = r.c.num_attention_heads, d = r.c.head_dim;
  Tensor o(DType::f64, {r.B, S, H, d});
  const bool compressed = r.in.size() > 3;
  const auto n = compressed ? r.in[3]->dim(1) : 0;
  for (std::int64_t b = 0; b < r.B; ++b)
    attention_row(r.f64(0) + b * S * H * d, r.f64(1) + b * Sk * d, r.u8(2) + b * S * Sk,
                  compressed ? r.f64(3) + b * n * d : nullptr, compressed ? r.u8(4) + b * S * n : nullptr, S, Sk, n, H, d,
                  r.weight(0).data<double>(), o.data<double>() + b * S * H * d);
  return {o};
}

}  // namespace

void register_attention(Handlers& t) { t.add(OpKind::attention, run_attention); }

}  // namespace tdiff::refcpu
