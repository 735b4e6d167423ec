#pragma once
// Attention masks on the device (refcpu computes the same integers on the host):
//   window_mask: valid [B, S] (u8, 1 = a real token) -> win [B, S, S] (u8),
//                win[b, i, j] = (i − W < j ≤ i) and valid[b, j]   (W = sliding_window)
// The compressed-entry masks (attn.cmp.mask) stay on the host: they are small and read the
// indexer's selection.
#include <cstdint>

#include "hip/vendor.h"

namespace tdiff::hip {

void window_mask(const std::uint8_t* d_valid, std::int64_t B, std::int64_t S, std::int64_t window, std::uint8_t* d_win,
                 hipStream_t stream);

}  // namespace tdiff::hip
