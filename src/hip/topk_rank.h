#pragma once
// Device part shared by topk.hip and indexer.hip: the rank of a row's elements under the
// top-k order of emu/topk_order.h (emu::topk sorts by the same rule) — the number of
// elements of the row that come before it. The order is strict, so the ranks of a row are a
// permutation of 0..n-1.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/arith.h"
#include "emu/topk_order.h"
#include "hip/vendor.h"

namespace tdiff::hip::detail {

inline constexpr int kTopkThreads = 256;
inline constexpr int kTopkTile = 1024;  // elements staged in LDS per pass: 12 KiB

struct TopkShared {
  float value[kTopkTile];
  std::uint64_t order[kTopkTile];
};

__device__ inline float topk_key(const float* row, const float* bias, std::int64_t j, arith::Fmt cmp) {
  return emu::topk_value(bias ? emu::topk_biased(row[j], bias[j], cmp) : row[j], cmp);
}

// Rank of element i (valid: i < n) in its row; every thread of the workgroup must call it with
// the same n (it synchronises while streaming the row through LDS).
__device__ inline std::int64_t topk_rank(const float* row, const float* bias, std::int64_t n, std::int64_t i, bool valid,
                                         arith::Fmt cmp, bool unstable, std::uint64_t row_seed, TopkShared& sh) {
  const float my_v = valid ? topk_key(row, bias, i, cmp) : 0.0f;
  const std::uint64_t my_o = valid ? emu::topk_tie_rank(i, unstable, row_seed) : 0;
  std::int64_t rank = 0;
  for (std::int64_t j0 = 0; j0 < n; j0 += kTopkTile) {
    const int m = static_cast<int>(n - j0 < kTopkTile ? n - j0 : kTopkTile);
    __syncthreads();
    for (int t = static_cast<int>(threadIdx.x); t < m; t += static_cast<int>(blockDim.x)) {
      sh.value[t] = topk_key(row, bias, j0 + t, cmp);
      sh.order[t] = emu::topk_tie_rank(j0 + t, unstable, row_seed);
    }
    __syncthreads();
    if (valid)
      for (int t = 0; t < m; ++t) {
        rank += emu::topk_before(sh.value[t], sh.order[t], my_v, my_o) ? 1 : 0;
      }
  }
  return rank;
}

}  // namespace tdiff::hip::detail
