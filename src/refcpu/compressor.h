#pragma once
// Gated pooling of the CSA/HCA compressors and the indexer (model-spec §3.5), float64.
// One batch row: P, Z [S, c·δ] of the row's tokens, position bias pb [μ, c·δ].
//   non-overlapping (c = 1): out[w, ch] = Σ_j softmax_j(Z[wμ+j, ch] + pb[j, ch]) · P[wμ+j, ch]
//   overlapping (c = 2):     2μ slots: the A half (channels 0..δ−1) of window w−1 (none for
//                            w = 0) and the B half (channels δ..2δ−1) of window w.
// Windows start at the row's first real token, so padding never enters a window.
#include <cstdint>

namespace tdiff::refcpu {

// Pools n = ⌊len/μ⌋ entries of one row; P, Z point at the row's first real token, row
// stride c·δ; out [n, δ].
void gated_pool(const double* P, const double* Z, std::int64_t len, const double* pb, std::int64_t rate,
                std::int64_t width, bool overlap, double* out);

}  // namespace tdiff::refcpu
