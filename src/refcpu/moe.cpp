#include "refcpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/parallel_errors.h"
#include "refcpu/handlers.h"
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

// The FFN with its three products given as functions (out = in · Wᵀ for Wg, Wu, Wd).
using Product = std::function<void(const double* in, std::int64_t width, std::int64_t out_width, int which, double* out)>;
void ffn(const double* x, std::int64_t N, std::int64_t D, std::int64_t I, double limit, double* y, const Product& product,
         bool parallel) {
  std::vector<double> g(static_cast<std::size_t>(N * I)), u(static_cast<std::size_t>(N * I));
  product(x, D, I, 0, g.data());
  product(x, D, I, 1, u.data());
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t i = 0; i < N * I; ++i) {
    const double gi = std::min(g[static_cast<std::size_t>(i)], limit);
    const double ui = std::clamp(u[static_cast<std::size_t>(i)], -limit, limit);
    g[static_cast<std::size_t>(i)] = gi / (1.0 + std::exp(-gi)) * ui;
  }
  product(g.data(), I, D, 2, y);
}

}  // namespace

void swiglu_ffn(const double* x, std::int64_t N, std::int64_t D, const double* Wg, const double* Wu,
                const double* Wd, std::int64_t I, double limit, double* y) {
  const double* W[3] = {Wg, Wu, Wd};
  ffn(x, N, D, I, limit, y,
      [&](const double* in, std::int64_t width, std::int64_t out_width, int which, double* out) {
        linear(in, N, width, W[which], out_width, out);
      },
      true);
}

void routed_experts(const double* z, std::int64_t N, std::int64_t D, const std::int64_t* idx, const double* wt,
                    std::int64_t K, const ExpertRows& weights, std::int64_t E, std::int64_t I, double limit,
                    double* routed) {
  // Every (token, slot) result, then the weighted sum in slot order. Experts run in
  // parallel, each converted when a token selects it (the products inside are serial); a
  // row's bits do not depend on the thread or on the other rows of its expert (linear.h).
  std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(E));  // flat (t·K + k) per expert
  for (std::int64_t r = 0; r < N * K; ++r) rows[static_cast<std::size_t>(idx[r])].push_back(r);
  std::vector<double> slot_out(static_cast<std::size_t>(N * K * D));
  ParallelErrors errors;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& mine = rows[static_cast<std::size_t>(e)];
    if (mine.empty()) continue;
    errors.run([&] {
      const auto n = static_cast<std::int64_t>(mine.size());
      std::vector<double> xg(static_cast<std::size_t>(n * D)), yg(static_cast<std::size_t>(n * D));
      for (std::int64_t i = 0; i < n; ++i)
        std::copy_n(z + (mine[static_cast<std::size_t>(i)] / K) * D, D, xg.data() + i * D);
      // gate = rows [0, I) of gate_up, up = rows [I, 2I), down = part 1.
      ffn(xg.data(), n, D, I, limit, yg.data(),
          [&](const double* in, std::int64_t width, std::int64_t out_width, int which, double* out) {
            const int part = which == 2 ? 1 : 0;
            const std::int64_t first = which == 1 ? I : 0;
            linear_streamed_serial(in, n, width,
                                   [&](std::int64_t r0, std::int64_t r1, double* dst) { weights(e, part, first + r0, first + r1, dst); },
                                   out_width, out);
          },
          false);
      for (std::int64_t i = 0; i < n; ++i)
        std::copy_n(yg.data() + i * D, D, slot_out.data() + mine[static_cast<std::size_t>(i)] * D);
    });
  }
  errors.rethrow();
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t c = 0; c < D; ++c) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += wt[t * K + k] * slot_out[static_cast<std::size_t>((t * K + k) * D + c)];
      routed[t * D + c] = acc;
    }
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

std::vector<Tensor> run_router(RefCall& r) {
  const Tensor& w = r.weight(0);
  const auto E = w.dim(0), N = r.N;
  Tensor logit(DType::f64, {N, E}), score(DType::f64, {N, E});
  linear(r.f64(0), N, r.c.hidden_size, w.data<double>(), E, logit.data<double>());
  router_scores(logit.data<double>(), N * E, score.data<double>());
  return {logit, score};
}

// Hash routing (a token-id table, weight 0, with the ids as input 1) or the top-K of
// score + bias: the routing bias only chooses, it never weighs.
std::vector<Tensor> run_moe_select(RefCall& r) {
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

std::vector<Tensor> run_moe_weights(RefCall& r) {
  const auto K = r.c.num_experts_per_tok, E = r.c.n_routed_experts;
  Tensor wt(DType::f64, {r.N, K});
  routing_weights(r.f64(0), r.i64(1), r.N, E, K, r.c.routed_scaling_factor, wt.data<double>());
  return {wt};
}

std::vector<Tensor> run_moe_experts(RefCall& r) {
  const auto D = r.c.hidden_size, K = r.c.num_experts_per_tok;
  Tensor routed(DType::f64, {r.N, D});
  const WeightStore& w = r.ctx.weights;
  const std::string* parts[2] = {&r.s.weights.at(0), &r.s.weights.at(1)};
  routed_experts(r.f64(0), r.N, D, r.i64(1), r.f64(2), K,
                 [&](std::int64_t e, int part, std::int64_t r0, std::int64_t r1, double* dst) {
                   w.expert_rows_f64(*parts[part], e, r0, r1, dst);
                 },
                 r.c.n_routed_experts, r.c.moe_intermediate_size, r.c.swiglu_limit, routed.data<double>());
  return {routed};
}

std::vector<Tensor> run_moe_shared(RefCall& r) {
  const auto D = r.c.hidden_size;
  Tensor y(DType::f64, {r.N, D});
  swiglu_ffn(r.f64(0), r.N, D, r.weight(0).data<double>(), r.weight(1).data<double>(), r.weight(2).data<double>(),
             r.c.moe_intermediate_size, r.c.swiglu_limit, y.data<double>());
  return {y};
}

// The MoE output f = routed + shared, in the shape of the FFN input z (input 2).
std::vector<Tensor> run_add(RefCall& r) {
  Tensor f(DType::f64, r.in[2]->shape());
  const double *a = r.f64(0), *b = r.f64(1);
  double* out = f.data<double>();
  for (std::int64_t i = 0; i < f.numel(); ++i) out[i] = a[i] + b[i];
  return {f};
}

}  // namespace

void register_moe(RefHandlers& t) {
  t.add(OpKind::router, run_router);
  t.add(OpKind::moe_select, run_moe_select);
  t.add(OpKind::moe_weights, run_moe_weights);
  t.add(OpKind::moe_experts, run_moe_experts);
  t.add(OpKind::moe_shared, run_moe_shared);
  t.add(OpKind::add, run_add);
}

}  // namespace tdiff::refcpu
