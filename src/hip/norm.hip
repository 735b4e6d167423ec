// RMSNorm kernels (norm.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/norm.h"

#include "emu/norm.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

constexpr int kLanes = static_cast<int>(emu::kLanes);

__global__ void __launch_bounds__(kLanes) rms_norm_kernel(const float* x, std::int64_t n, const float* g, float eps,
                                                          Fmt stats, Fmt out, float* y) {
  __shared__ float lane[kLanes];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  float a = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += kLanes) a = fma_fmt_rn(xr[i], xr[i], a, stats);
  lane[threadIdx.x] = a;
  __syncthreads();
  for (int width = kLanes / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) lane[threadIdx.x] = arith::add_fmt(lane[threadIdx.x], lane[threadIdx.x + width], stats);
    __syncthreads();
  }
  const float mean = arith::round_fmt(lane[0] / static_cast<float>(n), stats);
  const float f = arith::round_fmt(1.0f / sqrtf(arith::add_fmt(mean, eps, stats)), stats);
  for (std::int64_t i = threadIdx.x; i < n; i += kLanes) {
    const float v = mul_rn(xr[i], f);
    y[r * n + i] = arith::round_fmt(g ? mul_rn(g[i], v) : v, out);
  }
}

}  // namespace

void rms_norm(const float* d_x, std::int64_t rows, std::int64_t n, const float* d_g, float eps, Fmt stats, Fmt out,
              float* d_y, hipStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kLanes, 0, stream>>>(d_x, n, d_g, eps, stats, out, d_y);
  check_kernel("rms_norm");
}

}  // namespace tdiff::hip
