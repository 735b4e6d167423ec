// Attention masks (mask.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/mask.h"

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

}  // namespace

void window_mask(const std::uint8_t* d_valid, std::int64_t B, std::int64_t S, std::int64_t window, std::uint8_t* d_win,
                 hipStream_t stream) {
  const std::int64_t n = B * S * S;
  if (n == 0) return;
  window_mask_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_valid, B, S, window, d_win);
  check_kernel("window_mask");
}

}  // namespace tdiff::hip
