// Device top-k (hip/topk.h): one workgroup per row, ranks by counting (hip/topk_rank.h).
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/topk.h"

#include <stdexcept>

#include "hip/kernel_common.h"
#include "hip/topk_rank.h"

namespace tdiff::hip {

namespace {

__global__ void __launch_bounds__(detail::kTopkThreads)
    topk_rows_kernel(const float* values, std::int64_t n, std::int64_t k, const float* bias, arith::Fmt cmp,
                     bool unstable, std::uint64_t seed, std::int64_t* out) {
  __shared__ detail::TopkShared sh;
  const std::int64_t r = blockIdx.x;
  const float* row = values + r * n;
  const std::uint64_t row_seed = seed ^ static_cast<std::uint64_t>(r);
  for (std::int64_t i0 = 0; i0 < n; i0 += blockDim.x) {
    const std::int64_t i = i0 + threadIdx.x;
    const bool valid = i < n;
    const std::int64_t rank = detail::topk_rank(row, bias, n, i, valid, cmp, unstable, row_seed, sh);
    if (valid && rank < k) out[r * k + rank] = i;
  }
}

}  // namespace

void topk_rows(const float* d_values, std::int64_t rows, std::int64_t n, std::int64_t k, const float* d_bias,
               const TopkSpec& spec, std::int64_t* d_out, hipStream_t stream) {
  if (k < 1 || k > n) throw std::invalid_argument("hip::topk_rows: k must be in [1, n]");
  if (rows == 0) return;
  topk_rows_kernel<<<static_cast<unsigned>(rows), detail::kTopkThreads, 0, stream>>>(
      d_values, n, k, d_bias, spec.cmp, spec.ties == TieBreak::unstable, spec.seed, d_out);
  check_kernel("topk_rows");
}

}  // namespace tdiff::hip
