// The simulated split's kernels (collective.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/collective.h"

#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__device__ inline std::int64_t global_id() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

struct RankColumn {  // rank r's value of one element: partials[r n + e]
  const float* p;
  std::int64_t n, e;
  __device__ float operator()(int r) const { return p[r * n + e]; }
};

__global__ void reduce_kernel(const float* partials, int ranks, std::int64_t n, emu::ReduceSpec spec, float* out) {
  const std::int64_t e = global_id();
  if (e < n) out[e] = emu::reduce_element(RankColumn{partials, n, e}, ranks, e, n, spec);
}

__global__ void slice_kernel(const float* src, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t width,
                             float* dst) {
  const std::int64_t i = global_id();
  if (i >= rows * width) return;
  const std::int64_t r = i / width, j = i % width;
  dst[i] = src[r * cols + c0 + j];
}

}  // namespace

void reduce_ranks(const float* d_partials, int ranks, std::int64_t n, const emu::ReduceSpec& spec, float* d_out,
                  hipStream_t stream) {
  if (n == 0) return;
  reduce_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_partials, ranks, n, spec, d_out);
  check_kernel("reduce_ranks");
}

void slice_columns(const float* d_src, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t width,
                   float* d_dst, hipStream_t stream) {
  if (rows * width == 0) return;
  slice_kernel<<<blocks_for(rows * width, 256), 256, 0, stream>>>(d_src, rows, cols, c0, width, d_dst);
  check_kernel("slice_columns");
}

}  // namespace tdiff::hip
