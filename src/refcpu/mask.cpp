// Attention masks of the reference (model-spec §4.1 step 4, 4.4 step 30), exact booleans.
//   window_mask: mask [B, S] (u8) -> M [B, S, S], M[i, j] = (i − W < j ≤ i) ∧ mask[j]
//   cmp_mask:    C [B, n, d], pos [B, S] (, sel [B, S, k]) -> M [B, S, n] (refcpu/mask.h)
#include <algorithm>

#include "refcpu/stage_call.h"
#include "refcpu/mask.h"

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_window_mask(StageCall& r) {
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

std::vector<Tensor> run_cmp_mask(StageCall& r) {
  const auto n = r.in[0]->dim(1);
  Tensor m(DType::boolean, {r.B, r.S, n});
  const bool picked = r.in.size() > 2;
  compressed_mask(r.i64(1), r.batch.length.data(), picked ? r.i64(2) : nullptr, r.B, r.S, n,
                  picked ? r.in[2]->dim(2) : 0, r.s.rate, m.data<std::uint8_t>());
  return {m};
}

}  // namespace

void compressed_mask(const std::int64_t* pos, const std::int64_t* length, const std::int64_t* sel, std::int64_t B,
                     std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, std::uint8_t* vis) {
  for (std::int64_t t = 0; t < B * S; ++t) {
    std::uint8_t* row = vis + t * n;
    if (sel) {  // CSA: the indexer's selection (already causal)
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t w = sel[t * k + j];
        if (w >= 0 && w < n) row[w] = 1;
      }
      continue;
    }
    const std::int64_t causal = std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / rate : 0, length[t / S] / rate);
    for (std::int64_t w = 0; w < causal; ++w) row[w] = 1;
  }
}

void register_mask(Handlers& t) {
  t.add(OpKind::window_mask, run_window_mask);
  t.add(OpKind::cmp_mask, run_cmp_mask);
}

}  // namespace tdiff::refcpu
