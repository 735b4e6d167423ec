#pragma once
// Dense products of the reference, float64.
//   linear:  x [N, in], W [out, in]  ->  y [N, out] = x · Wᵀ
//   grouped: x [N, G·c], W [G·R, c]   ->  y [N, G·R], y[:, gR:(g+1)R] = x[:, gc:(g+1)c] · W[gR:(g+1)R]ᵀ
// Rows are processed in fixed chunks of kRowChunk with Eigen's blocked product inside each
// chunk and OpenMP across chunks, so a row's result depends only on that row and W: the same
// bits for any thread count and for any position of the row in the batch (padding).
#include <cstdint>

namespace tdiff::refcpu {

inline constexpr std::int64_t kRowChunk = 64;

void linear(const double* x, std::int64_t rows, std::int64_t in, const double* w, std::int64_t out, double* y);
void grouped_linear(const double* x, std::int64_t rows, std::int64_t groups, std::int64_t in_per_group,
                    const double* w, std::int64_t out_per_group, double* y);

}  // namespace tdiff::refcpu
