#pragma once
// The emu model of the top-k kernels (router and indexer) in the order of emu/topk_order.h:
// values rounded to the comparison format first; exact ties broken by the lower index (policy
// "index") or in a run-dependent order (policy "unstable", the memory order of a parallel
// sort). The indexer score: q·k per head and the head sum in the index_score format.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

// The top-k knobs as the kernels take them (emu and hip): comparison format, tie rule and the
// stage seed (row r of a launch uses seed ^ r).
struct TopkSpec {
  Fmt cmp = Fmt::f32;               // topk_compare
  TieBreak ties = TieBreak::index;  // topk_ties
  std::uint64_t seed = 0;           // stage_hash of the stage and run
};
TopkSpec topk_spec(const Numerics& num, std::uint64_t seed);

// The k largest of values[0..n) (descending), rounding to `cmp` first; `seed` varies the tie
// order when ties are unstable.
void topk(const float* values, std::int64_t n, std::int64_t k, Fmt cmp, TieBreak ties, std::uint64_t seed,
          std::int64_t* out);
void indexer_scores(const float* QI, const float* KI, const float* weights, const std::int64_t* pos, std::int64_t S,
                    std::int64_t n, std::int64_t n_row, std::int64_t heads, std::int64_t dim, std::int64_t rate,
                    Fmt f, float* score);

}  // namespace tdiff::emu
