// Attention masks of the reference (shared spec 4.1 step 4, 4.4 step 30), exact booleans.
//   window_mask: mask [B, S] (u8) -> M [B, S, S], M[i, j] = (i − W < j ≤ i) ∧ mask[j]
//   cmp_mask:    C [B, n, d], pos [B, S] (, sel [B, S, k]) -> M [B, S, n]: the causal entries
//                w < min(⌊(pos + 1)/m⌋, ⌊len/m⌋) (HCA), or the indexer's selection (CSA)
#include <algorithm>

#include "refcpu/handlers.h"

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_window_mask(RefCall& r) {
  const std::int64_t B = r.B, S = r.S;
  Tensor m(DType::boolean, {B, S, S});
  auto* out = m.data<std::uint8_t>();
  const auto* mask = r.u8(0);
  const auto Wn = r.c.sliding_window;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < S; ++j)
        out[(b * S + i) * S + j] = (j > i - Wn && j <= i && mask[b * S + j]) ? 1 : 0;
  return {m};
}

std::vector<Tensor> run_cmp_mask(RefCall& r) {
  const std::int64_t S = r.S, rate = r.s.rate;
  const auto n = r.in[0]->dim(1);
  Tensor m(DType::boolean, {r.B, S, n});
  auto* out = m.data<std::uint8_t>();
  const auto* pos = r.i64(1);
  for (std::int64_t t = 0; t < r.N; ++t) {
    const std::int64_t b = t / S;
    const std::int64_t causal =
        std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / rate : 0, r.batch.length[static_cast<std::size_t>(b)] / rate);
    if (r.in.size() > 2) {  // CSA: the indexer's selection (already causal)
      const auto k = r.in[2]->dim(2);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto w = r.i64(2)[t * k + j];
        if (w >= 0) out[t * n + w] = 1;
      }
    } else {
      for (std::int64_t w = 0; w < causal; ++w) out[t * n + w] = 1;
    }
  }
  return {m};
}

}  // namespace

void register_mask(RefHandlers& t) {
  t.add(OpKind::window_mask, run_window_mask);
  t.add(OpKind::cmp_mask, run_cmp_mask);
}

}  // namespace tdiff::refcpu
