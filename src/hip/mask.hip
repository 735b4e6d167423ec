// Attention masks (mask.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/mask.h"

#include "hip/device.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__global__ void window_mask_kernel(const std::uint8_t* valid, std::int64_t B, std::int64_t S, std::int64_t window,
                                   std::uint8_t* win) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= B * S * S) return;
  const std::int64_t j = e % S, i = (e / S) % S, b = e / (S * S);
  win[e] = (j > i - window && j <= i && valid[b * S + j]) ? 1 : 0;
}

// HCA: every entry a token's position and its row's length make visible.
__global__ void causal_entries_kernel(const std::int64_t* pos, const std::int64_t* length, std::int64_t S,
                                      std::int64_t n, std::int64_t rate, std::int64_t total, std::uint8_t* vis) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const std::int64_t t = e / n, w = e % n;
  const std::int64_t p = pos[t] + 1, by_pos = p >= 0 ? p / rate : 0, by_len = length[t / S] / rate;
  vis[e] = w < (by_pos < by_len ? by_pos : by_len) ? 1 : 0;
}

// CSA: the indexer's picks of each token, set in a zeroed mask.
__global__ void picked_entries_kernel(const std::int64_t* sel, std::int64_t n, std::int64_t k, std::int64_t total,
                                      std::uint8_t* vis) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const std::int64_t w = sel[e];
  if (w >= 0 && w < n) vis[(e / k) * n + w] = 1;
}

}  // namespace

void compressed_mask(const std::int64_t* d_pos, const std::int64_t* d_length, const std::int64_t* d_sel, std::int64_t B,
                     std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, std::uint8_t* d_vis,
                     hipStream_t stream) {
  const std::int64_t cells = B * S * n;
  if (cells == 0) return;
  if (!d_sel) {
    causal_entries_kernel<<<blocks_for(cells, 256), 256, 0, stream>>>(d_pos, d_length, S, n, rate, cells, d_vis);
    check_kernel("compressed_mask (causal entries)");
    return;
  }
  memset_async(d_vis, 0, static_cast<std::size_t>(cells), stream);
  const std::int64_t picks = B * S * k;
  if (picks == 0) return;
  picked_entries_kernel<<<blocks_for(picks, 256), 256, 0, stream>>>(d_sel, n, k, picks, d_vis);
  check_kernel("compressed_mask (picked entries)");
}

void window_mask(const std::uint8_t* d_valid, std::int64_t B, std::int64_t S, std::int64_t window, std::uint8_t* d_win,
                 hipStream_t stream) {
  const std::int64_t n = B * S * S;
  if (n == 0) return;
  window_mask_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_valid, B, S, window, d_win);
  check_kernel("window_mask");
}

}  // namespace tdiff::hip
