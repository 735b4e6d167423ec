#pragma once
// Device top-k (router expert choice, indexer selection): emu/topk.h on the GPU, in the order
// of emu/topk_order.h (shared with emu).
//   values [rows, n] (float32) -> out [rows, k] (int64): the k largest per row, descending,
//   compared after rounding to `cmp` (and, with a bias, after v + bias[j] in `cmp`).
//   Ties: TieBreak::index — lower index first (deterministic); TieBreak::unstable — the
//   emu's run-dependent order: among equal values, element j ranks by mix64(seed_r ^ j) with
//   the per-row seed seed_r = seed ^ r, as emu::topk(…, seed ^ t, …) does, so a new run seed
//   gives a new order and hip == emu for the same seed. One workgroup per row; each element's rank is the number of elements that
//   beat it (a strict total order), element i lands at out[rank] when rank < k.
// All pointers are device pointers; launches are asynchronous on `stream`; a launch error
// throws std::runtime_error.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/arith.h"
#include "emu/topk.h"
#include "hip/vendor.h"

namespace tdiff::hip {

// emu's spec (emu::topk_spec): topk_compare, topk_ties, the stage seed; row r uses seed ^ r.
using TopkSpec = emu::TopkSpec;

// d_bias: null, or [n] added to every row in the comparison format first (moe_select:
// biased = add_fmt(score, bias, cmp)). Requires 1 <= k <= n.
void topk_rows(const float* d_values, std::int64_t rows, std::int64_t n, std::int64_t k, const float* d_bias,
               const TopkSpec& spec, std::int64_t* d_out, hipStream_t stream);

}  // namespace tdiff::hip
