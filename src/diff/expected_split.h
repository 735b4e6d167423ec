#pragma once
// The extra roundings a split adds to a stage's local error (docs/design/tensor-parallel.md
// §3.4). For a row-parallel sum y = Σ_r p_r over N ranks, each p_r over K/N terms:
//   local² = ( u_w² + (K/N) u_acc² + u_p² ρ_p + u_red² ρ_red ) / 3
// ρ_p = Σ p_r² / y² ≈ 1 (the N partials rounded to the storage format), ρ_red = Σ_j s_j² / y²
// over the N - 1 rounded partial sums of the all-reduce ≈ (N + 1)/2 - 1/N for uncorrelated
// partials of equal size (1 at N = 2, 2.25 at 4, 4.375 at 8), whatever the order. ring, tree
// and fixed round every hop to the storage format (their last hop is the output's rounding);
// custom1 and custom2 add in float32 and round once (the output's rounding, ρ_red = 0).
#include <cstdint>
#include <string>

#include "model/stage_graph.h"
#include "numerics/policy.h"

namespace tdiff {

struct SplitRounding {
  int ranks = 1;              // 1: the stage is not split
  std::int64_t split_k = 0;   // the accumulation length cut N ways (o_b's G R_o, the experts' I)
  double partials = 0;        // ρ_p: the ranks' partials rounded (relative to the output)
  double hops = 0;            // ρ_red: the all-reduce's rounded partial sums
  bool output_rounded = true; // false: the last hop is the output's rounding (ring, tree, fixed)
  std::string note;           // "tp=4 ring: 4 partials + 3 hops"
};

// What the split does to stage `s`'s outputs: attn.o_b (K split, all-reduce #1), moe.experts and
// moe.shared (the down projection's K split; reduced here under moe_reduce=reduce_each), moe.out
// (the per-rank add and all-reduce #2 under sum_then_reduce). ranks = 1 for every other stage,
// and for the MoE under expert parallelism (experts whole).
SplitRounding split_rounding(const Stage& s, const Split& split, const ModelConfig& c);

}  // namespace tdiff
