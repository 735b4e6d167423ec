// The MoE family: router, moe_select, moe_weights, moe_experts, moe_shared, add.
#include "emu/moe.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "emu/emu_backend.h"
#include "emu/linear.h"
#include "emu/stage_call.h"
#include "emu/topk.h"
#include "emu/topk_order.h"

namespace tdiff::emu {

GemmSpec router_spec(const Numerics& num, std::uint64_t seed) {
  const Fmt rf = fmt_of(num.router);
  return GemmSpec{rf, rf == Fmt::f32 ? Fmt::f32 : fmt_of(num.matmul_accum), rf, num.reduction == Reduction::atomic, seed};
}

FfnSpec ffn_spec(const Numerics& num, bool routed, std::uint64_t seed) {
  const Fmt st = fmt_of(num.storage);
  return FfnSpec{matmul_spec(num, Fmt::f32, seed), matmul_spec(num, st, seed), st, routed || num.shared_clip,
                 num.reduction == Reduction::atomic};
}

namespace {

std::vector<Tensor> run_router(StageCall& k) {
  const auto E = k.weight(0).dim(0), N = k.N, D = k.c.hidden_size;
  const GemmSpec spec = router_spec(k.num, k.seed);
  const std::vector<float> z = operand(k.load(0, k.st), N, D, spec.in);
  std::vector<float> logit(static_cast<std::size_t>(N * E)), score(logit.size());
  gemm(z.data(), N, D, k.gemm_weight(0, spec.in).data(), E, spec, logit.data());
  for (std::size_t i = 0; i < logit.size(); ++i) {
    const float x = logit[i];
    score[i] = arith::round_fmt(std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x))), spec.out);
  }
  return {store(logit, {N, E}), store(score, {N, E})};
}

std::vector<Tensor> run_moe_select(StageCall& k) {
  if (k.in.size() > 1) return k.refcpu_outputs();  // hash routing: a table lookup
  const auto K = k.c.num_experts_per_tok, E = k.c.n_routed_experts, N = k.N;
  const TopkSpec spec = topk_spec(k.num, k.seed);
  auto score = k.load_f32(0);
  auto bias = to_float(k.weight(0));
  Tensor idx(DType::i64, {N, K});
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < N; ++t) {
    std::vector<float> biased(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e)
      biased[static_cast<std::size_t>(e)] =
          topk_biased(score[static_cast<std::size_t>(t * E + e)], bias[static_cast<std::size_t>(e)], spec.cmp);
    topk(biased.data(), E, K, spec.cmp, spec.ties, spec.seed ^ static_cast<std::uint64_t>(t), idx.data<std::int64_t>() + t * K);
  }
  return {idx};
}

std::vector<Tensor> run_moe_weights(StageCall& k) {
  const auto K = k.c.num_experts_per_tok, E = k.c.n_routed_experts, N = k.N;
  auto score = k.load_f32(0);
  const auto* idx = k.in[1]->data<std::int64_t>();
  std::vector<float> bias;
  if (k.num.routing_bias_in_weights) {
    const std::string name = fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", k.s.layer);
    if (k.ctx.weights.has(name)) bias = to_float(k.ctx.weights.f64(name));
  }
  std::vector<float> wt(static_cast<std::size_t>(N * K));
  for (std::int64_t t = 0; t < N; ++t) {
    float sum = 0;
    auto g = [&](std::int64_t j) {
      const auto e = idx[t * K + j];
      return score[static_cast<std::size_t>(t * E + e)] + (bias.empty() ? 0.0f : bias[static_cast<std::size_t>(e)]);
    };
    for (std::int64_t j = 0; j < K; ++j) sum += g(j);
    const float den = k.num.routing_norm_eps ? sum + 1e-20f : sum;
    for (std::int64_t j = 0; j < K; ++j)
      wt[static_cast<std::size_t>(t * K + j)] = g(j) / den * static_cast<float>(k.c.routed_scaling_factor);
  }
  return {store(wt, {N, K})};
}

// A SwiGLU FFN over a gathered group of rows: gate/up GEMMs, clipped SwiGLU in float32
// stored in the storage format, down GEMM.
std::vector<float> ffn(const std::vector<float>& x, std::int64_t rows, std::int64_t D, std::int64_t I, const float* wg,
                       const float* wu, const float* wd, const FfnSpec& spec, float limit) {
  auto xq = operand(x, rows, D, spec.gate_up.in);
  std::vector<float> g(static_cast<std::size_t>(rows * I)), u(g.size()), y(static_cast<std::size_t>(rows * D));
  gemm(xq.data(), rows, D, wg, I, spec.gate_up, g.data());
  gemm(xq.data(), rows, D, wu, I, spec.gate_up, u.data());
  for (std::size_t i = 0; i < g.size(); ++i) {
    float gi = g[i], ui = u[i];
    if (spec.clip) gi = std::min(gi, limit), ui = std::clamp(ui, -limit, limit);
    g[i] = arith::round_fmt(gi / (1.0f + std::exp(-gi)) * ui, spec.st);
  }
  gemm(operand(g, rows, I, spec.down.in).data(), rows, I, wd, D, spec.down, y.data());
  return y;
}

// Rank r's share of a SwiGLU FFN split over `ranks` (tensor parallel): the gate/up rows
// [r I/ranks, (r+1) I/ranks) (column-parallel: each output's sum whole, so exact), the SwiGLU
// on that slice, and the down GEMM over the same K range (row-parallel): its partial [rows, D]
// in the storage format. ranks = 1 is ffn() itself.
std::vector<float> ffn_rank(const std::vector<float>& x, std::int64_t rows, std::int64_t D, std::int64_t I,
                            const float* wg, const float* wu, const float* wd, const FfnSpec& spec, float limit, int r,
                            int ranks) {
  if (ranks == 1) return ffn(x, rows, D, I, wg, wu, wd, spec, limit);
  const std::int64_t width = I / ranks;
  const std::vector<float> wd_r = column_slice(wd, D, I, r * width, width);
  FfnSpec rank_spec = spec;
  rank_spec.down.seed = arith::mix64(spec.down.seed ^ static_cast<std::uint64_t>(r + 1));
  return ffn(x, rows, D, width, wg + r * width * D, wu + r * width * D, wd_r.data(), rank_spec, limit);
}

std::vector<Tensor> run_moe_shared(StageCall& k) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size;
  const FfnSpec spec = ffn_spec(k.num, false, k.seed);
  const Fmt in = spec.gate_up.in;
  const int ranks = k.moe_tensor_parallel() ? k.split.tp : 1;
  std::vector<std::vector<float>> partials;
  const auto x = k.load(0, k.st);
  for (int r = 0; r < ranks; ++r)
    partials.push_back(ffn_rank(x, k.N, D, I, k.gemm_weight(0, in).data(), k.gemm_weight(1, in).data(),
                                k.gemm_weight(2, spec.down.in).data(), spec, static_cast<float>(k.c.swiglu_limit), r, ranks));
  if (ranks == 1) return {store(partials[0], {k.N, D})};
  return {k.keep_or_reduce("shared", partials, {k.N, D})};
}

// Every token's K expert outputs, weighted and summed: in k order (fixed), or in a
// run-dependent order with every contribution rounded into the stored row (atomic).
// Expert parallel (experts_per_rank > 0): the contributions arrive by owning rank (experts
// [r E/ep, (r+1) E/ep) on rank r), slots in k order within a rank.
void combine(const std::vector<float>& slot_out, const std::vector<float>& wt, std::int64_t N, std::int64_t K,
             std::int64_t D, const FfnSpec& spec, std::uint64_t seed, std::vector<float>& out,
             const std::int64_t* idx = nullptr, std::int64_t experts_per_rank = 0) {
  const Fmt st = spec.st;
  const bool atomic = spec.atomic_combine;
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < N; ++t) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(K));
    for (std::int64_t j = 0; j < K; ++j) order[static_cast<std::size_t>(j)] = j;
    if (experts_per_rank > 0)
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return idx[t * K + a] / experts_per_rank < idx[t * K + b] / experts_per_rank;
      });
    if (atomic) {  // experts finish in a run-dependent order and atomically add into the token's stored row
      std::uint64_t h = arith::mix64(seed ^ static_cast<std::uint64_t>(t));
      for (std::int64_t i = K - 1; i > 0; --i) {
        std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(h % static_cast<std::uint64_t>(i + 1))]);
        h = arith::mix64(h);
      }
    }
    for (std::int64_t ch = 0; ch < D; ++ch) {
      float acc = 0;
      for (auto j : order) {
        const float c_k = wt[static_cast<std::size_t>(t * K + j)] * slot_out[static_cast<std::size_t>((t * K + j) * D + ch)];
        // atomic: each contribution lands in the stored output with its own rounding
        acc = atomic ? arith::add_fmt(acc, arith::round_fmt(c_k, st), st) : acc + c_k;
      }
      out[static_cast<std::size_t>(t * D + ch)] = arith::round_fmt(acc, st);
    }
  }
}

// Rank r's slot outputs (every token slot t K + k that chose an expert), its experts' FFNs
// over the rank's share of their width (ranks = 1: whole).
std::vector<float> slot_outputs(StageCall& k, const std::vector<float>& z, const std::int64_t* idx, const FfnSpec& spec,
                                int r, int ranks) {
  const auto D = k.c.hidden_size, I = k.c.moe_intermediate_size, K = k.c.num_experts_per_tok, N = k.N;
  const auto& gate_up = k.gemm_weight(0, spec.gate_up.in);
  const auto& down = k.gemm_weight(1, spec.down.in);
  const float limit = static_cast<float>(k.c.swiglu_limit);
  std::vector<float> slot_out(static_cast<std::size_t>(N * K * D));
  for (std::int64_t e = 0; e < k.c.n_routed_experts; ++e) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < N * K; ++i)
      if (idx[i] == e) rows.push_back(i);
    if (rows.empty()) continue;
    const auto n = static_cast<std::int64_t>(rows.size());
    std::vector<float> x(static_cast<std::size_t>(n * D));
    for (std::int64_t i = 0; i < n; ++i) std::copy_n(z.data() + (rows[static_cast<std::size_t>(i)] / K) * D, D, x.data() + i * D);
    const float* wg = gate_up.data() + e * 2 * I * D;
    auto y = ffn_rank(x, n, D, I, wg, wg + I * D, down.data() + e * D * I, spec, limit, r, ranks);
    for (std::int64_t i = 0; i < n; ++i) std::copy_n(y.data() + i * D, D, slot_out.data() + rows[static_cast<std::size_t>(i)] * D);
  }
  return slot_out;
}

// The routed experts as a grouped GEMM: token slots t·K+k gathered per expert. Tensor
// parallel: every rank combines its partial slot outputs into its routed partial; expert
// parallel: experts whole, combined in owning-rank order.
std::vector<Tensor> run_moe_experts(StageCall& k) {
  const auto D = k.c.hidden_size, K = k.c.num_experts_per_tok, N = k.N;
  const FfnSpec spec = ffn_spec(k.num, true, k.seed);
  const auto z = k.load(0, k.st);
  const auto* idx = k.in[1]->data<std::int64_t>();
  const auto wt = k.load_f32(2);
  const int ranks = k.moe_tensor_parallel() ? k.split.tp : 1;
  const std::int64_t per_rank = k.split.ep > 1 ? k.c.n_routed_experts / k.split.ep : 0;
  std::vector<std::vector<float>> partials;
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> out(static_cast<std::size_t>(N * D));
    combine(slot_outputs(k, z, idx, spec, r, ranks), wt, N, K, D, spec, k.seed, out, idx, per_rank);
    partials.push_back(std::move(out));
  }
  if (ranks == 1) return {store(partials[0], {N, D})};
  return {k.keep_or_reduce("routed", partials, {N, D})};
}

// moe.out under tensor parallelism with moe_reduce=sum_then_reduce (SGLang's forward_normal):
// each rank adds its routed and shared partials in the storage format, then one all-reduce.
// Without the partials (the inputs came from the reference) nothing was split: nullopt.
std::optional<std::vector<float>> sum_then_reduce(StageCall& k) {
  if (!k.moe_tensor_parallel() || k.split.moe_reduce != MoeReduce::sum_then_reduce || k.s.op_class != "moe.out")
    return std::nullopt;
  auto routed = k.be.take_partials(k.s.inputs.at(0).key(), *k.in[0]);
  auto shared = k.be.take_partials(k.s.inputs.at(1).key(), *k.in[1]);
  if (!routed || !shared) return std::nullopt;
  for (std::size_t r = 0; r < routed->ranks.size(); ++r) {
    auto& a = routed->ranks[r];
    const auto& b = shared->ranks.at(r);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = arith::round_fmt(a[i] + b[i], k.st);
  }
  return k.all_reduce(routed->ranks);
}

std::vector<Tensor> run_add(StageCall& k) {
  if (auto reduced = sum_then_reduce(k)) return {store(*reduced, k.in[2]->shape())};
  auto a = k.load(0, k.st), b = k.load(1, k.st);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = arith::round_fmt(a[i] + b[i], k.st);
  return {store(a, k.in[2]->shape())};
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

}  // namespace tdiff::emu
