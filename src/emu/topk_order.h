#pragma once
// The top-k order, host and device (emu::topk, hip's topk_rank): values compared after
// rounding to the comparison format, larger first; equal values by their tie rank, lower
// first. The tie rank is the index (TieBreak::index) or mix64(row_seed ^ index)
// (TieBreak::unstable: a run-dependent order, as a parallel sort's memory order); mix64 is a
// bijection, so the order is strict and every row's ranks are a permutation.
#include <cstdint>

#include "emu/arith.h"

namespace tdiff::emu {

// The value a top-k compares: rounded to `cmp`.
TDIFF_HD inline float topk_value(float v, arith::Fmt cmp) { return arith::round_fmt(v, cmp); }
// moe_select's biased score: score + bias in the comparison format.
TDIFF_HD inline float topk_biased(float score, float bias, arith::Fmt cmp) { return arith::add_fmt(score, bias, cmp); }
TDIFF_HD inline std::uint64_t topk_tie_rank(std::int64_t index, bool unstable, std::uint64_t row_seed) {
  return unstable ? arith::mix64(row_seed ^ static_cast<std::uint64_t>(index)) : static_cast<std::uint64_t>(index);
}
// Whether (value a, tie rank ta) comes before (b, tb).
TDIFF_HD inline bool topk_before(float a, std::uint64_t ta, float b, std::uint64_t tb) {
  return a > b || (a == b && ta < tb);
}

}  // namespace tdiff::emu
