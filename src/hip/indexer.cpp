// The indexer family on the device: idx_weights (hip/gemm.h), idx_score and idx_topk
// (hip/indexer.h); knobs: emu::indexer_spec, emu::topk_spec.
#include <algorithm>
#include <cmath>

#include "emu/indexer.h"
#include "emu/linear.h"
#include "hip/elementwise.h"
#include "hip/gemm.h"
#include "hip/indexer.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

std::vector<Tensor> run_idx_weights(StageCall& k) {
  const auto HI = k.weight_rows(0), K = k.c.hidden_size, N = k.N;
  const GemmSpec spec = k.device_spec(emu::matmul_spec(k.num, Fmt::f32, k.seed));
  float* tmp = k.scratch(N * HI);
  gemm(k.operand(k.load(0, k.st), N, K, spec), K, k.gemm_weight(0, spec), tmp, HI, N, K, HI, spec, k.cs);
  const Fmt f = emu::indexer_spec(k.num).score;
  auto y = k.out({k.B, k.S, HI}, f);
  scale_round(tmp, N * HI, 1.0f / std::sqrt(static_cast<float>(HI)), f, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

std::vector<Tensor> run_idx_score(StageCall& k) {
  const Shape qs = k.shape(0);
  const auto n = k.shape(1).at(1), HI = qs.at(2), dI = qs.at(3);
  const emu::IndexerSpec ix = emu::indexer_spec(k.num);
  auto y = k.out({k.B, k.S, n}, Fmt::f32);
  idx_score(k.load(0, ix.st), k.load(1, ix.st), k.load(2, ix.score), k.i64(3), k.batch_span(true), k.B, k.S, n, HI, dI,
            k.s.rate, ix, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

std::vector<Tensor> run_idx_topk(StageCall& k) {
  const auto n = k.shape(0).at(2), top = std::min(k.c.index_topk, n);
  auto sel = k.out({k.B, k.S, top}, Fmt::f32, DType::i64);
  idx_topk(k.load_f32(0), k.i64(1), k.batch_span(true), k.B, k.S, n, top, k.s.rate, emu::topk_spec(k.num, k.seed), sel.i64(),
           k.cs);
  k.emit(std::move(sel));
  return k.outputs();
}

}  // namespace

void register_indexer(Handlers& h) {
  h.add(OpKind::idx_weights, run_idx_weights);
  h.add(OpKind::idx_score, run_idx_score);
  h.add(OpKind::idx_topk, run_idx_topk);
}

}  // namespace tdiff::hip
