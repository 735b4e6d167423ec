#include "refcpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "base/parallel_errors.h"
#include "refcpu/stage_call.h"
#include "refcpu/indexer.h"
#include "refcpu/linear.h"

namespace tdiff::refcpu {

void router_scores(const double* logit, std::int64_t count, double* score) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const double x = logit[i];
    score[i] = std::sqrt(x > 20.0 ? x : std::log1p(std::exp(x)));
  }
}

void routing_weights(const double* score, const std::int64_t* idx, std::int64_t tokens, std::int64_t E,
                     std::int64_t K, double rho, double* wt) {
  for (std::int64_t t = 0; t < tokens; ++t) {
    double sum = 0;
    for (std::int64_t k = 0; k < K; ++k) sum += score[t * E + idx[t * K + k]];
    for (std::int64_t k = 0; k < K; ++k) wt[t * K + k] = (score[t * E + idx[t * K + k]] / (sum + 1e-20)) * rho;
  }
}

namespace {

// silu(min(g, Λ)) · clamp(u, −Λ, Λ), the SwiGLU of model-spec §3.8 with its clipping.
double swiglu(double g, double u, double limit) {
  const double gi = std::min(g, limit), ui = std::clamp(u, -limit, limit);
  return gi / (1.0 + std::exp(-gi)) * ui;
}

std::int64_t tiles_of(std::int64_t n) { return (n + kColTile - 1) / kColTile; }

}  // namespace

void swiglu_ffn(const double* x, std::int64_t N, std::int64_t D, const double* Wg, const double* Wu,
                const double* Wd, std::int64_t I, double limit, double* y) {
  std::vector<double> g(static_cast<std::size_t>(N * I)), u(static_cast<std::size_t>(N * I));
  linear(x, N, D, Wg, I, g.data());
  linear(x, N, D, Wu, I, u.data());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < N * I; ++i)
    g[static_cast<std::size_t>(i)] = swiglu(g[static_cast<std::size_t>(i)], u[static_cast<std::size_t>(i)], limit);
  linear(g.data(), N, I, Wd, D, y);
}

namespace {

// The (token, slot) rows grouped by expert, slot order kept inside each, every expert's group
// padded with zero rows to whole kExpertRowChunk chunks: expert e's rows are [first[e],
// first[e] + count[e]) of the padded layout, row r = t·K + k at at[r].
struct ExpertLayout {
  std::vector<std::int64_t> first, count, at, token;  // token: the token of each padded row (-1: padding)
  std::int64_t rows = 0;                                 // padded rows in all
};

ExpertLayout layout_by_expert(const std::int64_t* idx, std::int64_t N, std::int64_t K, std::int64_t E) {
  ExpertLayout L;
  L.first.assign(static_cast<std::size_t>(E), 0), L.count.assign(static_cast<std::size_t>(E), 0);
  L.at.resize(static_cast<std::size_t>(N * K));
  for (std::int64_t r = 0; r < N * K; ++r) ++L.count[static_cast<std::size_t>(idx[r])];
  for (std::int64_t e = 0; e < E; ++e) {
    L.first[static_cast<std::size_t>(e)] = L.rows;
    L.rows += (L.count[static_cast<std::size_t>(e)] + kExpertRowChunk - 1) / kExpertRowChunk * kExpertRowChunk;
  }
  L.token.assign(static_cast<std::size_t>(L.rows), -1);
  std::vector<std::int64_t> fill(L.first);
  for (std::int64_t r = 0; r < N * K; ++r) {
    const std::int64_t pos = fill[static_cast<std::size_t>(idx[r])]++;
    L.at[static_cast<std::size_t>(r)] = pos;
    L.token[static_cast<std::size_t>(pos)] = r / K;
  }
  return L;
}

// Work items (expert, column tile) over the experts some token selects, so every thread is
// busy however few experts there are; each item converts its tile of the expert's weights.
std::vector<std::pair<std::int64_t, std::int64_t>> expert_items(const ExpertLayout& L, std::int64_t tiles) {
  std::vector<std::pair<std::int64_t, std::int64_t>> v;
  for (std::size_t e = 0; e < L.count.size(); ++e)
    if (L.count[e] > 0)
      for (std::int64_t t = 0; t < tiles; ++t) v.emplace_back(static_cast<std::int64_t>(e), t);
  return v;
}

}  // namespace

void routed_experts(const double* z, std::int64_t N, std::int64_t D, const std::int64_t* idx, const double* wt,
                    std::int64_t K, const ExpertRows& weights, std::int64_t E, std::int64_t I, double limit,
                    double* routed) {
  const ExpertLayout L = layout_by_expert(idx, N, K, E);
  auto rows_of = [&](std::int64_t e) { return L.count[static_cast<std::size_t>(e)]; };
  auto padded_rows_of = [&](std::int64_t e) { return (rows_of(e) + kExpertRowChunk - 1) / kExpertRowChunk * kExpertRowChunk; };
  // h's padding rows stay zero: they are the down product's padding.
  std::vector<double> h(static_cast<std::size_t>(L.rows * I), 0.0), y(static_cast<std::size_t>(L.rows * D));
  ParallelErrors errors;
  // h = SwiGLU(x · Wgᵀ, x · Wuᵀ), gate = rows [0, I) of gate_up, up = rows [I, 2I).
  const auto up_items = expert_items(L, tiles_of(I));
#pragma omp parallel
  {
    std::vector<double> x, g, u, piece;
#pragma omp for schedule(dynamic)
    for (std::size_t w = 0; w < up_items.size(); ++w)
      errors.run([&] {
        // Plain variables, not a structured binding: clang 14 (the sanitizer build) cannot capture one.
        const std::int64_t e = up_items[w].first, t = up_items[w].second;
        const std::int64_t r0 = L.first[static_cast<std::size_t>(e)], n = rows_of(e), np = padded_rows_of(e);
        const std::int64_t c0 = t * kColTile, width = std::min(kColTile, I - c0);
        x.assign(static_cast<std::size_t>(np * D), 0.0);
        for (std::int64_t i = 0; i < n; ++i) std::copy_n(z + L.token[static_cast<std::size_t>(r0 + i)] * D, D, x.data() + i * D);
        g.resize(static_cast<std::size_t>(np * width)), u.resize(g.size());
        for (const auto& [first_row, out] : {std::pair{c0, g.data()}, std::pair{I + c0, u.data()}})
          expert_tile_product(x.data(), np, D,
                              [&, first_row = first_row](std::int64_t k0, std::int64_t k1, double* dst) {
                                weights(e, 0, first_row, first_row + width, k0, k1, dst);
                              },
                              width, out, width, piece);
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < width; ++j)
            h[static_cast<std::size_t>((r0 + i) * I + c0 + j)] =
                swiglu(g[static_cast<std::size_t>(i * width + j)], u[static_cast<std::size_t>(i * width + j)], limit);
      });
  }
  errors.rethrow();
  // y = h · Wdᵀ, down = part 1.
  const auto down_items = expert_items(L, tiles_of(D));
#pragma omp parallel
  {
    std::vector<double> piece;
#pragma omp for schedule(dynamic)
    for (std::size_t w = 0; w < down_items.size(); ++w)
      errors.run([&] {
        const std::int64_t e = down_items[w].first, t = down_items[w].second;
        const std::int64_t r0 = L.first[static_cast<std::size_t>(e)], c0 = t * kColTile, width = std::min(kColTile, D - c0);
        expert_tile_product(h.data() + r0 * I, padded_rows_of(e), I,
                            [&](std::int64_t k0, std::int64_t k1, double* dst) { weights(e, 1, c0, c0 + width, k0, k1, dst); },
                            width, y.data() + r0 * D + c0, D, piece);
      });
  }
  errors.rethrow();
  // The weighted sum in slot order.
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t c = 0; c < D; ++c) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k)
        acc += wt[t * K + k] * y[static_cast<std::size_t>(L.at[static_cast<std::size_t>(t * K + k)] * D + c)];
      routed[t * D + c] = acc;
    }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_router(StageCall& r) {
  const Tensor& w = r.weight(0);
  const auto E = w.dim(0), N = r.N;
  Tensor logit(DType::f64, {N, E}), score(DType::f64, {N, E});
  linear(r.f64(0), N, r.c.hidden_size, w.data<double>(), E, logit.data<double>());
  router_scores(logit.data<double>(), N * E, score.data<double>());
  return {logit, score};
}

// Hash routing (a token-id table, weight 0, with the ids as input 1) or the top-K of
// score + bias: the routing bias only chooses, it never weighs.
std::vector<Tensor> run_moe_select(StageCall& r) {
  const auto K = r.c.num_experts_per_tok, E = r.c.n_routed_experts, N = r.N;
  Tensor idx(DType::i64, {N, K});
  auto* out = idx.data<std::int64_t>();
  if (r.in.size() > 1) {
    const Tensor& table = r.ctx.weights.i64(r.s.weights.at(0));
    const auto* ids = r.i64(1);
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t k = 0; k < K; ++k) out[t * K + k] = table.data<std::int64_t>()[ids[t] * K + k];
  } else {
    const double* bias = r.weight(0).data<double>();
    const double* score = r.f64(0);
    const TieRule tie_rule = r.ctx.tie_rule;
#pragma omp parallel for schedule(static)
    for (std::int64_t t = 0; t < N; ++t) {
      std::vector<double> biased(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e) biased[static_cast<std::size_t>(e)] = score[t * E + e] + bias[e];
      topk_indices(biased.data(), E, K, tie_rule, out + t * K);
    }
  }
  return {idx};
}

std::vector<Tensor> run_moe_weights(StageCall& r) {
  const auto K = r.c.num_experts_per_tok, E = r.c.n_routed_experts;
  Tensor wt(DType::f64, {r.N, K});
  routing_weights(r.f64(0), r.i64(1), r.N, E, K, r.c.routed_scaling_factor, wt.data<double>());
  return {wt};
}

std::vector<Tensor> run_moe_experts(StageCall& r) {
  const auto D = r.c.hidden_size, K = r.c.num_experts_per_tok;
  Tensor routed(DType::f64, {r.N, D});
  const WeightStore& w = r.ctx.weights;
  const std::string* parts[2] = {&r.s.weights.at(0), &r.s.weights.at(1)};
  routed_experts(r.f64(0), r.N, D, r.i64(1), r.f64(2), K,
                 [&](std::int64_t e, int part, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1,
                     double* dst) { w.expert_rows_f64(*parts[part], e, r0, r1, dst, c0, c1); },
                 r.c.n_routed_experts, r.c.moe_intermediate_size, r.c.swiglu_limit, routed.data<double>());
  return {routed};
}

std::vector<Tensor> run_moe_shared(StageCall& r) {
  const auto D = r.c.hidden_size;
  Tensor y(DType::f64, {r.N, D});
  swiglu_ffn(r.f64(0), r.N, D, r.weight(0).data<double>(), r.weight(1).data<double>(), r.weight(2).data<double>(),
             r.c.moe_intermediate_size, r.c.swiglu_limit, y.data<double>());
  return {y};
}

// The MoE output f = routed + shared, in the shape of the FFN input z (input 2).
std::vector<Tensor> run_add(StageCall& r) {
  Tensor f(DType::f64, r.in[2]->shape());
  const double *a = r.f64(0), *b = r.f64(1);
  double* out = f.data<double>();
  for (std::int64_t i = 0; i < f.numel(); ++i) out[i] = a[i] + b[i];
  return {f};
}

}  // namespace

void register_moe(Handlers& t) {
  t.add(OpKind::router, run_router);
  t.add(OpKind::moe_select, run_moe_select);
  t.add(OpKind::moe_weights, run_moe_weights);
  t.add(OpKind::moe_experts, run_moe_experts);
  t.add(OpKind::moe_shared, run_moe_shared);
  t.add(OpKind::add, run_add);
}

}  // namespace tdiff::refcpu
