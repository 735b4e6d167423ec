#pragma once
// Lightning indexer of CSA layers (model-spec §4.4 steps 27-29, 5.10, 5.11), float64.
//   score[i, w] = Σ_h (ReLU(QI[i,h] · KI[w]) · d_I^(−1/2)) · ω[i,h], −∞ where w is not causal
//                 (w ≥ ⌊(pos_i + 1)/m⌋) or not an entry of the row (w ≥ n_row)
//   topk:         the k = min(k_I, n) largest per row; non-causal picks become −1.
#include <cstdint>

#include "backend/backend.h"

namespace tdiff::refcpu {

// One batch row: QI [S, H_I, d_I], KI [n, d_I], w [S, H_I], pos [S] -> score [S, n].
void indexer_scores(const double* QI, const double* KI, const double* weights, const std::int64_t* pos,
                    std::int64_t S, std::int64_t n, std::int64_t n_row, std::int64_t heads, std::int64_t dim,
                    std::int64_t rate, double* score);
// Indices of the k largest of score[0..n) under the tie rule, in a canonical order: valid
// (causal) entries ascending, then −1 for picks that were not causal.
void topk_select(const double* score, std::int64_t n, std::int64_t k, std::int64_t causal_count, TieRule rule,
                 std::int64_t* out);
// The k largest of values[0..n) in descending value order (ties: see TieRule); used by the
// router too.
void topk_indices(const double* values, std::int64_t n, std::int64_t k, TieRule rule, std::int64_t* out);

}  // namespace tdiff::refcpu
