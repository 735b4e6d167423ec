// Operand conversion for the GEMM kernels (gemm.h): rounding to an operand format, fp8's
// scaled groups and blocks, 16-bit patterns packed and widened, and the device check of the
// paired fp16 rounding the vector-ALU kernel uses.
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/gemm.h"

#include <algorithm>
#include <stdexcept>

#include "hip/device.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

// Every float bit pattern u once, as the first of a pair (the second its neighbour u ^ 1, so
// both lanes of the paired conversion meet every pattern).
__global__ void round_f16_pair_check_kernel(unsigned long long* mismatches) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t u = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < (std::uint64_t{1} << 32);
       u += stride) {
    const float x = arith::bits_float(static_cast<std::uint32_t>(u)), y = arith::bits_float(static_cast<std::uint32_t>(u) ^ 1u);
    float a = x, b = y;
    arith::round_f16_pair(a, b);
    bad += arith::float_bits(a) != arith::float_bits(arith::round_f16(x));
    bad += arith::float_bits(b) != arith::float_bits(arith::round_f16(y));
  }
  if (bad) atomicAdd(mismatches, bad);
}

__global__ void bits16_kernel(const float* src, std::uint16_t* dst, std::int64_t n, bool bf16) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::bits16(src[i], bf16);
}

__global__ void operand_bits16_kernel(const float* src, std::uint16_t* dst, std::int64_t n, Fmt in) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::bits16(arith::mfma_operand(src[i], in), in == Fmt::bf16);
}

__global__ void inexact_kernel(const float* v, std::int64_t n, Fmt in, int* flag) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && arith::float_bits(arith::mfma_operand(v[i], in)) != arith::float_bits(v[i])) atomicOr(flag, 1);
}

__global__ void widen_kernel(const std::uint16_t* src, float* dst, std::int64_t n, bool bf16) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::from_bits16(src[i], bf16);
}

__global__ void operand_kernel(const float* src, float* dst, std::int64_t n, Fmt in) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = arith::mfma_operand(src[i], in);
}

// Block max of |v| (max is exact and order-free, so any tree gives the same bits).
template <int kN>
__device__ float block_amax(float v) {
  __shared__ float red[kN];
  red[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (int s = kN / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// One workgroup of 128 threads per (row, 128-column group).
__global__ void act_fp8_kernel(const float* src, float* dst, std::int64_t cols, std::int64_t segment,
                               std::int64_t groups_per_segment) {
  const std::int64_t row = blockIdx.y;
  const std::int64_t seg = blockIdx.x / groups_per_segment, grp = blockIdx.x % groups_per_segment;
  const std::int64_t c0 = seg * segment + grp * 128;
  const std::int64_t c1 = std::min(std::min(cols, (seg + 1) * segment), c0 + 128);
  const std::int64_t c = c0 + threadIdx.x;
  const float v = c < c1 ? src[row * cols + c] : 0.0f;
  const float amax = block_amax<128>(v);
  const float s = amax > 0 ? amax / 448.0f : 1.0f;
  if (c < c1) dst[row * cols + c] = arith::round_f8(v / s) * s;
}

// One workgroup of 256 threads per 128x128 block.
__global__ void weight_fp8_kernel(float* w, std::int64_t rows, std::int64_t cols) {
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * 128, c0 = static_cast<std::int64_t>(blockIdx.x) * 128;
  float m = 0;
  for (int i = threadIdx.x; i < 128 * 128; i += 256) {
    const std::int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < rows && c < cols) m = fmaxf(m, fabsf(w[r * cols + c]));
  }
  const float amax = block_amax<256>(m);
  float s = 1.0f;
  if (amax > 0) {
    // emu: exp2(ceil(log2(amax / 448))) with a float log2; log2 in double rounded to float
    // is that correctly rounded float log2.
    const float l = static_cast<float>(log2(static_cast<double>(amax / 448.0f)));
    s = ldexpf(1.0f, static_cast<int>(ceilf(l)));
  }
  for (int i = threadIdx.x; i < 128 * 128; i += 256) {
    const std::int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < rows && c < cols) {
      float& v = w[r * cols + c];
      v = arith::round_f8(v / s) * s;
    }
  }
}

}  // namespace

void quantize_activations(const float* d_src, float* d_dst, std::int64_t rows, std::int64_t cols, std::int64_t segment,
                          Fmt in, hipStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  if (in != Fmt::f8) {
    if (in == Fmt::f32 && d_src == d_dst) return;
    operand_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in);
    check_kernel("quantize_activations");
    return;
  }
  if (segment <= 0 || segment > cols) segment = cols;
  const std::int64_t per_seg = (segment + 127) / 128;
  const dim3 grid(static_cast<unsigned>(per_seg * ((cols + segment - 1) / segment)), static_cast<unsigned>(rows));
  act_fp8_kernel<<<grid, 128, 0, stream>>>(d_src, d_dst, cols, segment, per_seg);
  check_kernel("quantize_activations fp8");
}

void quantize_weight(float* d_w, std::int64_t rows, std::int64_t cols, Fmt in, hipStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n == 0 || in == Fmt::f32) return;
  if (in != Fmt::f8) {
    operand_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_w, d_w, n, in);
    check_kernel("quantize_weight");
    return;
  }
  const dim3 grid(blocks_for(cols, 128), blocks_for(rows, 128));
  weight_fp8_kernel<<<grid, 256, 0, stream>>>(d_w, rows, cols);
  check_kernel("quantize_weight fp8");
}

void mark_inexact_operands(const float* d_v, std::int64_t n, Fmt in, int* d_flag, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("mark_inexact_operands: the format is not 16-bit");
  if (n == 0) return;
  inexact_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_v, n, in, d_flag);
  check_kernel("mark_inexact_operands");
}

void widen_bits16(const std::uint16_t* d_src, float* d_dst, std::int64_t n, Fmt in, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("widen_bits16: the format is not 16-bit");
  if (n == 0) return;
  widen_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in == Fmt::bf16);
  check_kernel("widen_bits16");
}

void pack_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, Fmt in, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("pack_bits16: the format is not 16-bit");
  if (n == 0) return;
  bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in == Fmt::bf16);
  check_kernel("pack_bits16");
}

void quantize_activations_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, Fmt in,
                                 hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("quantize_activations_bits16: the format is not 16-bit");
  if (n == 0) return;
  operand_bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in);
  check_kernel("quantize_activations_bits16");
}

std::uint64_t round_f16_pair_mismatches(hipStream_t stream) {
  DeviceBuffer count(sizeof(unsigned long long));
  memset_async(count.get(), 0, sizeof(unsigned long long), stream);
  round_f16_pair_check_kernel<<<4096, 256, 0, stream>>>(count.as<unsigned long long>());
  check_kernel("round_f16_pair check");
  unsigned long long host = 0;
  copy_d2h(&host, count.get(), sizeof host, stream);
  stream_sync(stream);
  return host;
}

}  // namespace tdiff::hip
