#pragma once
// The lightning indexer of CSA layers (model-spec §4.4 steps 27-29), emu on the GPU.
//   idx_score: QI [B, S, H_I, d_I], KI [B, n, d_I], w [B, S, H_I] (index_score format),
//     pos [B, S], length [B] (int64) ->
//     score[b, i, e] = Σ_h fma_f(round_f(max(QI[b,i,h]·KI[b,e], 0)·d_I^(−1/2)), w[b,i,h])
//     with f = index_score, dots sequential over d_I in f, heads in order; −∞ where
//     e ≥ ⌊(pos+1)/μ⌋ (not causal) or e ≥ ⌊length[b]/μ⌋. Q and K tiles staged through LDS.
//     spec: emu::indexer_spec.
//   idx_topk: score [B, S, n], pos [B, S], length [B] -> sel [B, S, k], k = min(index_topk, n):
//     the k largest per token (topk_compare, topk_ties; token t = b·S + i uses seed ^ t), the
//     picks sorted ascending, those ≥ the causal count dropped and the tail filled with −1.
#include <cstdint>

#include "emu/indexer.h"
#include "hip/vendor.h"
#include "hip/topk.h"

namespace tdiff::hip {

void idx_score(const float* d_QI, const float* d_KI, const float* d_w, const std::int64_t* d_pos,
               const std::int64_t* d_length, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t heads,
               std::int64_t dim, std::int64_t rate, const emu::IndexerSpec& spec, float* d_score, hipStream_t stream);

// spec: cmp = topk_compare, ties = topk_ties, seed = the stage seed (emu: stage_hash).
void idx_topk(const float* d_score, const std::int64_t* d_pos, const std::int64_t* d_length, std::int64_t B,
              std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, const TopkSpec& spec,
              std::int64_t* d_sel, hipStream_t stream);

}  // namespace tdiff::hip
