#include "emu/topk.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "emu/topk_order.h"

namespace tdiff::emu {

TopkSpec topk_spec(const Numerics& num, std::uint64_t seed) { return {fmt_of(num.topk_compare), num.topk_ties, seed}; }

void topk(const float* values, std::int64_t n, std::int64_t k, Fmt cmp, TieBreak ties, std::uint64_t seed,
          std::int64_t* out) {
  struct Item {
    float v;
    std::uint64_t order;  // tie rank
    std::int64_t i;
  };
  std::vector<Item> items(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    items[static_cast<std::size_t>(i)] = {topk_value(values[i], cmp), topk_tie_rank(i, ties == TieBreak::unstable, seed), i};
  std::partial_sort(items.begin(), items.begin() + k, items.end(),
                    [](const Item& a, const Item& b) { return topk_before(a.v, a.order, b.v, b.order); });
  for (std::int64_t j = 0; j < k; ++j) out[j] = items[static_cast<std::size_t>(j)].i;
}

void indexer_scores(const float* QI, const float* KI, const float* weights, const std::int64_t* pos, std::int64_t S,
                    std::int64_t n, std::int64_t n_row, std::int64_t heads, std::int64_t dim, std::int64_t rate,
                    Fmt f, float* score) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t causal = pos[i] + 1 >= 0 ? (pos[i] + 1) / rate : 0;
    for (std::int64_t w = 0; w < n; ++w) {
      if (w >= causal || w >= n_row) {
        score[i * n + w] = -INFINITY;
        continue;
      }
      float acc = 0;
      for (std::int64_t h = 0; h < heads; ++h) {
        const float* q = QI + (i * heads + h) * dim;
        const float* kk = KI + w * dim;
        float dot = 0;
        for (std::int64_t c = 0; c < dim; ++c) dot = arith::fma_fmt(q[c], kk[c], dot, f);
        acc = arith::fma_fmt(arith::round_fmt(std::max(dot, 0.0f) * scale, f), weights[i * heads + h], acc, f);
      }
      score[i * n + w] = acc;
    }
  }
}

}  // namespace tdiff::emu
