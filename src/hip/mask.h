#pragma once
// Attention masks on the device (refcpu computes the same integers on the host):
//   window_mask: valid [B, S] (u8, 1 = a real token) -> win [B, S, S] (u8),
//                win[b, i, j] = (i − W < j ≤ i) and valid[b, j]   (W = sliding_window)
//   compressed_mask: pos [B, S] (i64), length [B] (i64) (, sel [B, S, k] (i64, -1 = none))
//                -> vis [B, S, n] (u8): HCA (no sel) vis[b, i, w] = w < min(⌊(pos + 1)/m⌋, ⌊len_b/m⌋);
//                CSA vis[b, i, w] = (w is one of the indexer's picks for token (b, i)), which
//                are causal already (m = rate). On the device, so a forward does not stop for
//                the host between the indexer and the attention.
#include <cstdint>

#include "hip/vendor.h"

namespace tdiff::hip {

void window_mask(const std::uint8_t* d_valid, std::int64_t B, std::int64_t S, std::int64_t window, std::uint8_t* d_win,
                 hipStream_t stream);
// sel may be null (HCA; k unused).
void compressed_mask(const std::int64_t* d_pos, const std::int64_t* d_length, const std::int64_t* d_sel, std::int64_t B,
                     std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, std::uint8_t* d_vis,
                     hipStream_t stream);

}  // namespace tdiff::hip
