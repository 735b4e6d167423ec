#include "refcpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "refcpu/stage_call.h"
#include "refcpu/linear.h"

namespace tdiff::refcpu {

void indexer_scores(const double* QI, const double* KI, const double* weights, const std::int64_t* pos,
                    std::int64_t S, std::int64_t n, std::int64_t n_row, std::int64_t heads, std::int64_t dim,
                    std::int64_t rate, double* score) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  // Per query token one DGEMM over the entries it may see (all heads at once): the shape
  // depends only on that token, so its bits do not depend on the thread count or the padding.
#pragma omp parallel
  {
    std::vector<double> dots;
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t i = 0; i < S; ++i) {
      const std::int64_t causal = pos[i] + 1 >= 0 ? (pos[i] + 1) / rate : 0;
      const std::int64_t visible = std::min({causal, n_row, n});
      double* out = score + i * n;
      std::fill(out + visible, out + n, -INFINITY);
      if (visible == 0) continue;
      dots.resize(static_cast<std::size_t>(heads * visible));
      gemm_serial(heads, visible, dim, QI + i * heads * dim, dim, KI, dim, true, dots.data(), visible);  // q_h · k_w
      for (std::int64_t w = 0; w < visible; ++w) {
        double acc = 0;
        for (std::int64_t h = 0; h < heads; ++h)
          acc += (std::max(dots[static_cast<std::size_t>(h * visible + w)], 0.0) * scale) * weights[i * heads + h];
        out[w] = acc;
      }
    }
  }
}

void topk_indices(const double* values, std::int64_t n, std::int64_t k, TieRule rule, std::int64_t* out) {
  std::vector<std::pair<double, std::int64_t>> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = {values[i], i};
  auto by_value_then_index = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (rule == TieRule::torch_cpu) {
    // torch.topk on the CPU: nth_element with "value greater" at k−1 picks the set; which of
    // several equal values land inside depends on libstdc++'s introselect (model-spec §5.11).
    auto greater = [](const auto& a, const auto& b) {
      return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
    };
    if (k < n) std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), greater);
    std::sort(v.begin(), v.begin() + k, by_value_then_index);
  } else {
    std::partial_sort(v.begin(), v.begin() + k, v.end(), by_value_then_index);
  }
  for (std::int64_t i = 0; i < k; ++i) out[i] = v[static_cast<std::size_t>(i)].second;
}

void topk_select(const double* score, std::int64_t n, std::int64_t k, std::int64_t causal_count, TieRule rule,
                 std::int64_t* out) {
  std::vector<std::int64_t> pick(static_cast<std::size_t>(k));
  topk_indices(score, n, k, rule, pick.data());
  std::sort(pick.begin(), pick.end());
  std::int64_t m = 0;
  for (auto w : pick)
    if (w < causal_count) out[m++] = w;
  while (m < k) out[m++] = -1;
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

// ω = (h·Wᵀ) · H_I^(−1/2): the per-head weights of the score sum.
std::vector<Tensor> run_idx_weights(StageCall& r) {
  const Tensor& w = r.weight(0);
  const auto HI = w.dim(0);
  Tensor out(DType::f64, {r.B, r.S, HI});
  linear(r.f64(0), r.N, r.c.hidden_size, w.data<double>(), HI, out.data<double>());
  const double scale = 1.0 / std::sqrt(static_cast<double>(HI));
  for (double& v : out.span<double>()) v *= scale;
  return {out};
}

std::vector<Tensor> run_idx_score(StageCall& r) {
  const Tensor &QI = *r.in[0], &KI = *r.in[1];
  const std::int64_t S = r.S;
  const auto n = KI.dim(1), HI = QI.dim(2), dI = QI.dim(3);
  Tensor score(DType::f64, {r.B, S, n});
  for (std::int64_t b = 0; b < r.B; ++b)
    indexer_scores(r.f64(0) + b * S * HI * dI, r.f64(1) + b * n * dI, r.f64(2) + b * S * HI, r.i64(3) + b * S, S, n,
                   r.batch.length[static_cast<std::size_t>(b)] / r.s.rate, HI, dI, r.s.rate,
                   score.data<double>() + b * S * n);
  return {score};
}

std::vector<Tensor> run_idx_topk(StageCall& r) {
  const std::int64_t S = r.S, N = r.N, rate = r.s.rate;
  const auto n = r.in[0]->dim(2), k = std::min(r.c.index_topk, n);
  Tensor sel(DType::i64, {r.B, S, k});
  const auto* pos = r.i64(1);
  const double* score = r.f64(0);
  const TieRule tie_rule = r.ctx.tie_rule;
  const Batch& batch = r.batch;
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < N; ++t) {
    const std::int64_t b = t / S;
    const std::int64_t causal =
        std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / rate : 0, batch.length[static_cast<std::size_t>(b)] / rate);
    topk_select(score + t * n, n, k, causal, tie_rule, sel.data<std::int64_t>() + t * k);
  }
  return {sel};
}

}  // namespace

void register_indexer(Handlers& t) {
  t.add(OpKind::idx_weights, run_idx_weights);
  t.add(OpKind::idx_score, run_idx_score);
  t.add(OpKind::idx_topk, run_idx_topk);
}

}  // namespace tdiff::refcpu
