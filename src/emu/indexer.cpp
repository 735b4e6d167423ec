// The indexer family: idx_weights, idx_score, idx_topk (the scores' and the top-k's
// arithmetic are in emu/topk.cpp).
#include "emu/indexer.h"

#include <algorithm>
#include <cmath>

#include "emu/linear.h"
#include "emu/stage_call.h"
#include "emu/topk.h"

namespace tdiff::emu {

IndexerSpec indexer_spec(const Numerics& num) { return {fmt_of(num.storage), fmt_of(num.index_score)}; }

namespace {

// h -> head weights [B, S, H_I] = round_score(h W^T · H_I^(−1/2)), the GEMM stored in float32.
std::vector<Tensor> run_idx_weights(StageCall& k) {
  const auto HI = k.weight(0).dim(0), N = k.N, D = k.c.hidden_size;
  const IndexerSpec ix = indexer_spec(k.num);
  const GemmSpec spec = matmul_spec(k.num, Fmt::f32, k.seed);
  std::vector<float> y(static_cast<std::size_t>(N * HI));
  gemm(operand(k.load(0, k.st), N, D, spec.in).data(), N, D, k.gemm_weight(0, spec.in).data(), HI, spec, y.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(HI));
  for (float& v : y) v = arith::round_fmt(v * scale, ix.score);
  return {store(y, {k.B, k.S, HI})};
}

std::vector<Tensor> run_idx_score(StageCall& k) {
  const auto B = k.B, S = k.S, n = k.in[1]->dim(1), HI = k.in[0]->dim(2), dI = k.in[0]->dim(3);
  const IndexerSpec ix = indexer_spec(k.num);
  auto QI = k.load(0, ix.st), KI = k.load(1, ix.st), w = k.load(2, ix.score);
  std::vector<float> score(static_cast<std::size_t>(B * S * n));
  for (std::int64_t b = 0; b < B; ++b)
    indexer_scores(QI.data() + b * S * HI * dI, KI.data() + b * n * dI, w.data() + b * S * HI,
                   k.in[3]->data<std::int64_t>() + b * S, S, n, k.batch.length[static_cast<std::size_t>(b)] / k.s.rate, HI,
                   dI, k.s.rate, ix.score, score.data() + b * S * n);
  return {store(score, {B, S, n})};
}

// The k best entries per token, ascending, those not yet causal dropped and the tail -1.
std::vector<Tensor> run_idx_topk(StageCall& k) {
  const auto n = k.in[0]->dim(2), top = std::min(k.c.index_topk, n), S = k.S, rate = k.s.rate;
  const TopkSpec spec = topk_spec(k.num, k.seed);
  auto score = k.load_f32(0);
  const auto* pos = k.in[1]->data<std::int64_t>();
  const auto& length = k.batch.length;
  Tensor sel(DType::i64, {k.B, S, top});
  auto* out = sel.data<std::int64_t>();
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < k.N; ++t) {
    const std::int64_t b = t / S;
    const std::int64_t causal =
        std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / rate : 0, length[static_cast<std::size_t>(b)] / rate);
    std::vector<std::int64_t> pick(static_cast<std::size_t>(top));
    topk(score.data() + t * n, n, top, spec.cmp, spec.ties, spec.seed ^ static_cast<std::uint64_t>(t), pick.data());
    std::sort(pick.begin(), pick.end());
    std::int64_t m = 0;
    for (auto w : pick)
      if (w < causal) out[t * top + m++] = w;
    while (m < top) out[t * top + m++] = -1;
  }
  return {sel};
}

}  // namespace

void register_indexer(Handlers& h) {
  h.add(OpKind::idx_weights, run_idx_weights);
  h.add(OpKind::idx_score, run_idx_score);
  h.add(OpKind::idx_topk, run_idx_topk);
}

}  // namespace tdiff::emu
