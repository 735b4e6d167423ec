#pragma once
// MoE kernels besides the GEMMs (gemm.h), emu's router / moe_weights / moe_experts on the GPU.
//   router_scores: logit [N, E] -> score = round_f(sqrt(softplus(logit))), softplus(x) = x
//     for x > 20, else log1p(exp(x)).
//   moe_weights: score [N, E], idx [N, K], bias [E] or null -> wt [N, K] =
//     g_k / (Σ_k g_k (+1e-20)) · scale, g_k = score[idx] (+ bias[idx]), sums in float32 in k order.
//   hash_route: ids [N], table [V, K] -> idx [N, K] = table[ids] (hash-routed layers choose
//     their experts by token id; an id outside [0, V) gives -1, which the case never holds).
//   expert_rows: idx [N, K] -> starts [E+1] and rows [N·K] (slots t·K+k grouped by expert, in
//     slot order within an expert): the gather lists of the grouped GEMM. One thread per expert.
//   swiglu: gu [rows, 2I] (gate | up) -> h [rows, I] = round_st(silu(g)·u), with g ≤ limit and
//     |u| ≤ limit when clipping.
//   combine: slot_out [N·K, D], wt [N, K] -> out [N, D]; fixed: Σ_k wt·slot in float32 in k
//     order, rounded once; expert parallel (idx given and experts_per_rank > 0): in the order
//     the contributions arrive, by owning rank idx / experts_per_rank, k order within a rank;
//     atomic: every term rounded to st and atomically added (rounded per add) into the zeroed
//     output, in the order the threads arrive.
#include <cstdint>

#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void router_scores(const float* d_logit, std::int64_t count, arith::Fmt f, float* d_score, hipStream_t stream);
void moe_weights(const float* d_score, const std::int64_t* d_idx, const float* d_bias, std::int64_t N, std::int64_t E,
                 std::int64_t K, bool norm_eps, float scale, float* d_wt, hipStream_t stream);
void hash_route(const std::int64_t* d_ids, const std::int64_t* d_table, std::int64_t N, std::int64_t V, std::int64_t K,
                std::int64_t* d_idx, hipStream_t stream);
void expert_rows(const std::int64_t* d_idx, std::int64_t NK, std::int64_t E, std::int32_t* d_starts,
                 std::int32_t* d_rows, hipStream_t stream);
void swiglu(const float* d_gu, std::int64_t rows, std::int64_t I, bool clip, float limit, arith::Fmt st, float* d_h,
            hipStream_t stream);
void combine(const float* d_slot_out, const float* d_wt, std::int64_t N, std::int64_t K, std::int64_t D, bool atomic,
             arith::Fmt st, float* d_out, hipStream_t stream, const std::int64_t* d_idx = nullptr,
             std::int64_t experts_per_rank = 0);

}  // namespace tdiff::hip
