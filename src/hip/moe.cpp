// The MoE family on the device: router, moe_select, moe_weights, moe_experts, moe_shared, add
// (hip/moe.h, hip/topk.h, hip/gemm.h; knobs: emu::router_spec, emu::ffn_spec, emu::topk_spec).
#include <algorithm>

#include <fmt/format.h>

#include "emu/moe.h"
#include "emu/topk.h"
#include "hip/collective.h"
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

// The shared expert's FFN over the intermediate columns [c0, c0 + I_r) of its I (a rank's
// share under tensor parallelism, emu's ffn_rank; the whole FFN: c0 = 0, I_r = I): gate and up
// side by side in one [N, 2 I_r] buffer (zeroed once for atomic split-K), SwiGLU, then the down
// GEMM over the same columns into y [N, D] in the storage format.
void shared_ffn(StageCall& k, const GemmInput& z, const emu::FfnSpec& ffn, std::int64_t c0, std::int64_t I_r, float* d_y) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, N = k.N;
  const GemmSpec gu_spec = k.device_spec(ffn.gate_up), down_spec = k.device_spec(ffn.down);
  const bool whole = I_r == I;
  float* gu = k.scratch(N * 2 * I_r);
  float* h = k.scratch(N * I_r);
  GemmGroups side;
  side.zero_output = false;
  if (gu_spec.atomic) memset_async(gu, 0, static_cast<std::size_t>(N * 2 * I_r) * 4, k.cs);
  const GemmWeight wg = whole ? k.gemm_weight(0, gu_spec) : GemmWeight(k.weight(0, gu_spec.in) + c0 * D);
  const GemmWeight wu = whole ? k.gemm_weight(1, gu_spec) : GemmWeight(k.weight(1, gu_spec.in) + c0 * D);
  gemm(z, D, wg, gu, 2 * I_r, N, D, I_r, gu_spec, k.cs, side);
  gemm(z, D, wu, gu + I_r, 2 * I_r, N, D, I_r, gu_spec, k.cs, side);
  swiglu(gu, N, I_r, ffn.clip, static_cast<float>(k.c.swiglu_limit), ffn.st, h, k.cs);
  GemmWeight wd = k.gemm_weight(2, down_spec);
  if (!whole) {  // the rank's columns of the row-parallel down projection [D, I]
    float* slice = k.scratch(D * I_r);
    slice_columns(k.weight(2, down_spec.in), D, I, c0, I_r, slice, k.cs);
    wd = GemmWeight(slice);
  }
  gemm(k.operand(h, N, I_r, down_spec), I_r, wd, d_y, D, N, I_r, D, down_spec, k.cs);
}

std::vector<Tensor> run_moe_shared(StageCall& k) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, N = k.N;
  const emu::FfnSpec ffn = emu::ffn_spec(k.num, false, k.seed);
  const GemmInput z = k.operand(k.load(0, k.st), N, D, k.device_spec(ffn.gate_up));
  if (!k.moe_tensor_parallel()) {
    auto y = k.out({N, D}, ffn.st);
    shared_ffn(k, z, ffn, 0, I, y.f());
    k.emit(std::move(y));
    return k.outputs();
  }
  const int tp = k.split.tp;
  auto partials = k.rank_partials(tp, N * D);
  for (int r = 0; r < tp; ++r) shared_ffn(k, z, ffn, r * (I / tp), I / tp, partials->as<float>() + r * N * D);
  k.keep_or_reduce(std::move(partials), tp, {N, D});
  return k.outputs();
}

// The routed experts' gather lists (expert_rows) and the grouped GEMMs' row bound.
struct ExpertGroups {
  std::int32_t* starts = nullptr;
  std::int32_t* rows = nullptr;
  std::int64_t max_rows = 0;
};

ExpertGroups expert_groups(StageCall& k) {
  const auto K = k.c.num_experts_per_tok, E = k.c.n_routed_experts, NK = k.N * K;
  ExpertGroups g;
  g.starts = k.scratch_of<std::int32_t>(E + 1);
  g.rows = k.scratch_of<std::int32_t>(NK);
  expert_rows(k.i64(1), NK, E, g.starts, g.rows, k.cs);
  std::vector<std::int32_t> h_starts(static_cast<std::size_t>(E + 1));
  copy_d2h(h_starts.data(), g.starts, h_starts.size() * 4, k.cs);
  stream_sync(k.cs);  // the largest group bounds the grid
  for (std::int64_t e = 0; e < E; ++e)
    g.max_rows = std::max<std::int64_t>(g.max_rows, h_starts[static_cast<std::size_t>(e + 1)] - h_starts[static_cast<std::size_t>(e)]);
  return g;
}

// Every slot's expert output slot [N·K, D] over the experts' intermediate columns [c0, c0 + I_r)
// (a rank's share under tensor parallelism; whole: c0 = 0, I_r = I): gate|up in one grouped
// GEMM per expert when whole, else gate and up each from the rank's rows of the stacked
// [E, 2I, D] weight, SwiGLU, and the down GEMM over the rank's columns of [E, D, I].
void routed_slots(StageCall& k, const GemmInput& z, const ExpertGroups& eg, const emu::FfnSpec& ffn, std::int64_t c0,
                  std::int64_t I_r, float* slot) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, K = k.c.num_experts_per_tok, N = k.N;
  const auto E = k.c.n_routed_experts, NK = N * K;
  const GemmSpec gu_spec = k.device_spec(ffn.gate_up), down_spec = k.device_spec(ffn.down);
  const bool whole = I_r == I;
  float* gu = k.scratch(NK * 2 * I_r);
  float* h = k.scratch(NK * I_r);
  GemmGroups g1;
  g1.count = E, g1.w_stride = 2 * I * D, g1.d_rows = eg.rows, g1.d_starts = eg.starts, g1.a_div = static_cast<std::int32_t>(K);
  g1.y_rows = NK;
  // Tile height from the rows an expert gets on average: each tile of rows reads the expert's
  // whole weight, so at 4096 tokens (96 rows an expert) 32-row tiles read every weight three
  // times and 128-row tiles once; a few dozen rows (1024 tokens) keep 32 (the grid covers the
  // SMs). The tile does not change the bits (gemm.h).
  const std::int64_t mean_rows = NK / std::max<std::int64_t>(E, 1);
  g1.tile_rows = mean_rows >= 80 ? 128 : mean_rows >= 40 ? 64 : 0;
  if (whole) {
    gemm(z, D, k.gemm_weight(0, gu_spec), gu, 2 * I, eg.max_rows, D, 2 * I, gu_spec, k.cs, g1);
  } else {  // gate rows [c0, c0 + I_r) and up rows [I + c0, ...) of every expert, side by side
    const float* w = k.weight(0, gu_spec.in);
    g1.zero_output = false;
    if (gu_spec.atomic) memset_async(gu, 0, static_cast<std::size_t>(NK * 2 * I_r) * 4, k.cs);
    gemm(z, D, GemmWeight(w + c0 * D), gu, 2 * I_r, eg.max_rows, D, I_r, gu_spec, k.cs, g1);
    gemm(z, D, GemmWeight(w + (I + c0) * D), gu + I_r, 2 * I_r, eg.max_rows, D, I_r, gu_spec, k.cs, g1);
  }
  swiglu(gu, NK, I_r, ffn.clip, static_cast<float>(k.c.swiglu_limit), ffn.st, h, k.cs);
  GemmGroups g2 = g1;
  g2.w_stride = D * I_r, g2.a_div = 1, g2.zero_output = true;
  GemmWeight wd = k.gemm_weight(1, down_spec);
  if (!whole) {
    float* slice = k.scratch(E * D * I_r);
    slice_columns(k.weight(1, down_spec.in), E * D, I, c0, I_r, slice, k.cs);
    wd = GemmWeight(slice);
  }
  gemm(k.operand(h, NK, I_r, down_spec), I_r, wd, slot, D, eg.max_rows, I_r, D, down_spec, k.cs, g2);
}

// Grouped GEMM: slots t·K+k gathered per expert. Tensor parallel: every rank combines its
// partial slot outputs into its routed partial; expert parallel: experts whole, combined in
// owning-rank order.
std::vector<Tensor> run_moe_experts(StageCall& k) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, K = k.c.num_experts_per_tok, N = k.N;
  const emu::FfnSpec ffn = emu::ffn_spec(k.num, true, k.seed);
  const GemmInput z = k.operand(k.load(0, k.st), N, D, k.device_spec(ffn.gate_up));
  const ExpertGroups eg = expert_groups(k);
  float* slot = k.scratch(N * K * D);
  const std::int64_t per_rank = k.split.ep > 1 ? k.c.n_routed_experts / k.split.ep : 0;
  if (!k.moe_tensor_parallel()) {
    auto y = k.out({N, D}, ffn.st);
    routed_slots(k, z, eg, ffn, 0, I, slot);
    combine(slot, k.load_f32(2), N, K, D, ffn.atomic_combine, ffn.st, y.f(), k.cs, k.i64(1), per_rank);
    k.emit(std::move(y));
    return k.outputs();
  }
  const int tp = k.split.tp;
  auto partials = k.rank_partials(tp, N * D);
  for (int r = 0; r < tp; ++r) {
    routed_slots(k, z, eg, ffn, r * (I / tp), I / tp, slot);
    combine(slot, k.load_f32(2), N, K, D, ffn.atomic_combine, ffn.st, partials->as<float>() + r * N * D, k.cs);
  }
  k.keep_or_reduce(std::move(partials), tp, {N, D});
  return k.outputs();
}

// moe.out under tensor parallelism with moe_reduce=sum_then_reduce (emu's sum_then_reduce):
// each rank adds its routed and shared partials in the storage format, then one all-reduce.
// Without the partials (the inputs came from the reference) nothing was split: false.
bool sum_then_reduce(StageCall& k, float* d_y) {
  if (!k.moe_tensor_parallel() || k.split.moe_reduce != MoeReduce::sum_then_reduce || k.s.op_class != "moe.out")
    return false;
  auto routed = k.take_partials(0);
  auto shared = k.take_partials(1);
  if (!routed || !shared) return false;
  const std::int64_t n = routed->n;
  float* sums = k.scratch(routed->ranks * n);
  add(routed->buf->as<float>(), shared->buf->as<float>(), routed->ranks * n, k.st, sums, k.cs);
  k.all_reduce(sums, routed->ranks, n, d_y);
  return true;
}

std::vector<Tensor> run_add(StageCall& k) {
  const Shape sh = k.shape(2);
  auto y = k.out(sh, k.st);
  if (!sum_then_reduce(k, y.f())) add(k.load(0, k.st), k.load(1, k.st), shape_numel(sh), k.st, y.f(), k.cs);
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
