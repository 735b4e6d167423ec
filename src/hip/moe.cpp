// The MoE family on the device: router, moe_select, moe_weights, moe_experts, moe_shared, add
// (hip/moe.h, hip/topk.h, hip/gemm.h; knobs: emu::router_spec, emu::ffn_spec, emu::topk_spec).
#include <algorithm>

#include <fmt/format.h>

#include "emu/moe.h"
#include "emu/topk.h"
#include "hip/elementwise.h"
#include "hip/gemm.h"
#include "hip/moe.h"
#include "hip/stage_call.h"
#include "hip/topk.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

std::vector<Tensor> run_router(StageCall& k) {
  const auto E = k.weight_rows(0), D = k.c.hidden_size, N = k.N;
  const GemmSpec spec = k.exact_sgemm(k.device_spec(emu::router_spec(k.num, k.seed)), k.st, 0);
  auto logit = k.out({N, E}, spec.out), score = k.out({N, E}, spec.out);
  gemm(k.operand(k.load(0, k.st), N, D, spec), D, k.gemm_weight(0, spec), logit.f(), E, N, D, E, spec, k.cs);
  router_scores(logit.f(), N * E, spec.out, score.f(), k.cs);
  k.emit(std::move(logit));
  k.emit(std::move(score));
  return k.outputs();
}

std::vector<Tensor> run_moe_select(StageCall& k) {
  const auto K = k.c.num_experts_per_tok, E = k.c.n_routed_experts, N = k.N;
  auto idx = k.out({N, K}, Fmt::f32, DType::i64);
  if (k.in.size() > 1) {  // hash routing: a table lookup of the token ids
    const auto& name = k.s.weights.at(0);
    hash_route(k.i64(1), k.table_i64(name), N, k.weight_rows(0), K, idx.i64(), k.cs);
  } else {
    topk_rows(k.load_f32(0), N, E, K, k.weight(0), emu::topk_spec(k.num, k.seed), idx.i64(), k.cs);
  }
  k.emit(std::move(idx));
  return k.outputs();
}

std::vector<Tensor> run_moe_weights(StageCall& k) {
  const auto K = k.c.num_experts_per_tok, E = k.c.n_routed_experts, N = k.N;
  const float* bias = nullptr;
  if (k.num.routing_bias_in_weights) {
    const std::string name = fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", k.s.layer);
    if (k.ctx.weights.has(name)) bias = k.weight(name, Fmt::f32);
  }
  auto wt = k.out({N, K}, Fmt::f32);
  moe_weights(k.load_f32(0), k.i64(1), bias, N, E, K, k.num.routing_norm_eps, static_cast<float>(k.c.routed_scaling_factor),
              wt.f(), k.cs);
  k.emit(std::move(wt));
  return k.outputs();
}

std::vector<Tensor> run_moe_shared(StageCall& k) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, N = k.N;
  const emu::FfnSpec ffn = emu::ffn_spec(k.num, false, k.seed);
  const GemmSpec gu_spec = k.device_spec(ffn.gate_up), down_spec = k.device_spec(ffn.down);
  const GemmInput z = k.operand(k.load(0, k.st), N, D, gu_spec);
  auto y = k.out({N, D}, ffn.st);
  float* gu = k.scratch(N * 2 * I);
  float* h = k.scratch(N * I);
  // gate and up side by side in one [N, 2I] buffer (zeroed once for atomic split-K)
  GemmGroups side;
  side.zero_output = false;
  if (gu_spec.atomic) memset_async(gu, 0, static_cast<std::size_t>(N * 2 * I) * 4, k.cs);
  gemm(z, D, k.gemm_weight(0, gu_spec), gu, 2 * I, N, D, I, gu_spec, k.cs, side);
  gemm(z, D, k.gemm_weight(1, gu_spec), gu + I, 2 * I, N, D, I, gu_spec, k.cs, side);
  swiglu(gu, N, I, ffn.clip, static_cast<float>(k.c.swiglu_limit), ffn.st, h, k.cs);
  gemm(k.operand(h, N, I, down_spec), I, k.gemm_weight(2, down_spec), y.f(), D, N, I, D, down_spec, k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

// Grouped GEMM: slots t·K+k gathered per expert; gate|up in one GEMM per expert.
std::vector<Tensor> run_moe_experts(StageCall& k) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, K = k.c.num_experts_per_tok, N = k.N;
  const auto E = k.c.n_routed_experts, NK = N * K;
  const emu::FfnSpec ffn = emu::ffn_spec(k.num, true, k.seed);
  const GemmSpec gu_spec = k.device_spec(ffn.gate_up), down_spec = k.device_spec(ffn.down);
  const GemmInput z = k.operand(k.load(0, k.st), N, D, gu_spec);
  auto y = k.out({N, D}, ffn.st);
  auto* starts = k.scratch_of<std::int32_t>(E + 1);
  auto* rows = k.scratch_of<std::int32_t>(NK);
  expert_rows(k.i64(1), NK, E, starts, rows, k.cs);
  std::vector<std::int32_t> h_starts(static_cast<std::size_t>(E + 1));
  copy_d2h(h_starts.data(), starts, h_starts.size() * 4, k.cs);
  stream_sync(k.cs);  // the largest group bounds the grid
  std::int64_t max_rows = 0;
  for (std::int64_t e = 0; e < E; ++e)
    max_rows = std::max<std::int64_t>(max_rows, h_starts[static_cast<std::size_t>(e + 1)] - h_starts[static_cast<std::size_t>(e)]);
  float* gu = k.scratch(NK * 2 * I);
  float* h = k.scratch(NK * I);
  float* slot = k.scratch(NK * D);
  GemmGroups g1;
  g1.count = E, g1.w_stride = 2 * I * D, g1.d_rows = rows, g1.d_starts = starts, g1.a_div = static_cast<std::int32_t>(K);
  g1.y_rows = NK;
  // Tile height from the rows an expert gets on average: each tile of rows reads the expert's
  // whole weight, so at 4096 tokens (96 rows an expert) 32-row tiles read every weight three
  // times and 128-row tiles once; a few dozen rows (1024 tokens) keep 32 (the grid covers the
  // SMs). The tile does not change the bits (gemm.h).
  const std::int64_t mean_rows = NK / std::max<std::int64_t>(E, 1);
  g1.tile_rows = mean_rows >= 80 ? 128 : mean_rows >= 40 ? 64 : 0;
  gemm(z, D, k.gemm_weight(0, gu_spec), gu, 2 * I, max_rows, D, 2 * I, gu_spec, k.cs, g1);
  swiglu(gu, NK, I, ffn.clip, static_cast<float>(k.c.swiglu_limit), ffn.st, h, k.cs);
  GemmGroups g2 = g1;
  g2.w_stride = D * I, g2.a_div = 1;
  gemm(k.operand(h, NK, I, down_spec), I, k.gemm_weight(1, down_spec), slot, D, max_rows, I, D, down_spec, k.cs, g2);
  combine(slot, k.load_f32(2), N, K, D, ffn.atomic_combine, ffn.st, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

std::vector<Tensor> run_add(StageCall& k) {
  const Shape sh = k.shape(2);
  auto y = k.out(sh, k.st);
  add(k.load(0, k.st), k.load(1, k.st), shape_numel(sh), k.st, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

}  // namespace

void register_moe(Handlers& h) {
  h.add(OpKind::router, run_router);
  h.add(OpKind::moe_select, run_moe_select);
  h.add(OpKind::moe_weights, run_moe_weights);
  h.add(OpKind::moe_experts, run_moe_experts);
  h.add(OpKind::moe_shared, run_moe_shared);
  h.add(OpKind::add, run_add);
}

}  // namespace tdiff::hip
