// Small kernels (elementwise.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/elementwise.h"

#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__device__ inline std::int64_t global_id() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

__global__ void embed_kernel(const std::int64_t* ids, std::int64_t N, const float* E, std::int64_t D, Fmt st, float* e) {
  const std::int64_t i = global_id();
  if (i >= N * D) return;
  const std::int64_t t = i / D, c = i % D;
  e[i] = arith::round_fmt(E[ids[t] * D + c], st);
}
__global__ void expand_kernel(const float* e, std::int64_t N, std::int64_t n, std::int64_t D, Fmt st, Fmt sf, float* X) {
  const std::int64_t i = global_id();
  if (i >= N * n * D) return;
  const std::int64_t t = i / (n * D), c = i % D;
  X[i] = arith::round_fmt(arith::round_fmt(e[t * D + c], st), sf);
}
__global__ void add_kernel(const float* a, const float* b, std::int64_t n, Fmt f, float* y) {
  const std::int64_t i = global_id();
  if (i < n) y[i] = arith::round_fmt(add_rn(a[i], b[i]), f);
}
__global__ void round_kernel(const float* x, std::int64_t n, Fmt f, float* y) {
  const std::int64_t i = global_id();
  if (i < n) y[i] = arith::round_fmt(x[i], f);
}
__global__ void scale_kernel(const float* x, std::int64_t n, float s, Fmt f, float* y) {
  const std::int64_t i = global_id();
  if (i < n) y[i] = arith::round_fmt(mul_rn(x[i], s), f);
}

}  // namespace

void embed(const std::int64_t* d_ids, std::int64_t N, const float* d_E, std::int64_t D, Fmt st, float* d_e,
           hipStream_t stream) {
  if (N * D == 0) return;
  embed_kernel<<<blocks_for(N * D, 256), 256, 0, stream>>>(d_ids, N, d_E, D, st, d_e);
  check_kernel("embed");
}
void hc_expand(const float* d_e, std::int64_t N, std::int64_t n, std::int64_t D, Fmt st, Fmt sf, float* d_X,
               hipStream_t stream) {
  if (N * n * D == 0) return;
  expand_kernel<<<blocks_for(N * n * D, 256), 256, 0, stream>>>(d_e, N, n, D, st, sf, d_X);
  check_kernel("hc_expand");
}
void add(const float* d_a, const float* d_b, std::int64_t count, Fmt f, float* d_y, hipStream_t stream) {
  if (count == 0) return;
  add_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(d_a, d_b, count, f, d_y);
  check_kernel("add");
}
void round_to(const float* d_x, std::int64_t count, Fmt f, float* d_y, hipStream_t stream) {
  if (count == 0) return;
  round_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(d_x, count, f, d_y);
  check_kernel("round_to");
}
void scale_round(const float* d_x, std::int64_t count, float s, Fmt f, float* d_y, hipStream_t stream) {
  if (count == 0) return;
  scale_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(d_x, count, s, f, d_y);
  check_kernel("scale_round");
}

}  // namespace tdiff::hip
