// The comparison kernel of run_compare.h.
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/run_compare.h"

#include <algorithm>
#include <cmath>

#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__device__ inline double value_of(const void* p, std::int64_t i, int elem_bytes) {
  if (elem_bytes == 4) return static_cast<double>(static_cast<const float*>(p)[i]);
  if (elem_bytes == 8) return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
  return static_cast<double>(static_cast<const std::uint8_t*>(p)[i]);
}

__device__ inline bool same_bits(const void* a, const void* b, std::int64_t i, int elem_bytes) {
  if (elem_bytes == 4) return static_cast<const unsigned int*>(a)[i] == static_cast<const unsigned int*>(b)[i];
  if (elem_bytes == 8)
    return static_cast<const unsigned long long*>(a)[i] == static_cast<const unsigned long long*>(b)[i];
  return static_cast<const std::uint8_t*>(a)[i] == static_cast<const std::uint8_t*>(b)[i];
}

// Grid-stride; a thread adds to the result only when it saw a difference (identical runs, the
// common case, take no atomics).
__global__ void compare_bits_kernel(const void* a, const void* b, std::int64_t n, int elem_bytes, BitCount* out) {
  unsigned long long differing = 0;
  float max_abs = 0.0f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (same_bits(a, b, i, elem_bytes)) continue;
    ++differing;
    const double x = value_of(a, i, elem_bytes), y = value_of(b, i, elem_bytes);
    const double d = isfinite(x) && isfinite(y) ? fabs(x - y) : HUGE_VAL;  // HUGE_VAL: +inf as a float too
    // Rounded up to a float, so the reported maximum never understates the difference.
    float f = static_cast<float>(d);
    if (static_cast<double>(f) < d) f = nextafterf(f, HUGE_VALF);
    max_abs = fmaxf(max_abs, f);
  }
  if (differing) {
    atomicAdd(&out->differing, differing);
    atomicMax(&out->max_abs_bits, __float_as_uint(max_abs));
  }
}

}  // namespace

void compare_bits(const void* d_a, const void* d_b, std::int64_t n, int elem_bytes, BitCount* d_out, hipStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(n, 256), 4096);
  compare_bits_kernel<<<blocks, 256, 0, stream>>>(d_a, d_b, n, elem_bytes, d_out);
  check_kernel("compare_bits");
}

}  // namespace tdiff::hip
