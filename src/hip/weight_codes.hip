// A release weight's codes decoded whole (gemm.h: dequantize_weight, decode_weight_bits16,
// mark_nan_codes), with the decode the matrix-core kernels use while staging (weight_codes.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/weight_codes.h"

#include <stdexcept>

#include "hip/gemm.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

using gemm_detail::decoded;

__global__ void dequantize_kernel(QuantWeight q, std::int64_t rows, std::int64_t K, float* dst) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * K) dst[i] = decoded(q, i / K, i % K, K);
}

__global__ void decode_bits16_kernel(QuantWeight q, std::int64_t rows, std::int64_t K, Fmt in, std::uint16_t* dst) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * K) dst[i] = mma::bits16(arith::mfma_operand(decoded(q, i / K, i % K, K), in), in == Fmt::bf16);
}

__global__ void nan_codes_kernel(const std::uint8_t* codes, std::int64_t n, int* flag) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && (codes[i] & 0x7fu) == 0x7fu) atomicOr(flag, 1);
}

}  // namespace

void dequantize_weight(const QuantWeight& w, std::int64_t rows, std::int64_t K, float* d_dst, hipStream_t stream) {
  const std::int64_t n = rows * K;
  if (n == 0) return;
  dequantize_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w, rows, K, d_dst);
  check_kernel("dequantize_weight");
}

void decode_weight_bits16(const QuantWeight& w, std::int64_t rows, std::int64_t K, Fmt in, std::uint16_t* d_dst,
                          hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("decode_weight_bits16: the format is not 16-bit");
  const std::int64_t n = rows * K;
  if (n == 0) return;
  decode_bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w, rows, K, in, d_dst);
  check_kernel("decode_weight_bits16");
}

void mark_nan_codes(const QuantWeight& w, std::int64_t rows, std::int64_t K, int* d_flag, hipStream_t stream) {
  if (w.format != QuantWeight::Format::fp8) throw std::logic_error("mark_nan_codes: E2M1 has no NaN codes");
  const std::int64_t n = rows * K;
  if (n == 0) return;
  nan_codes_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w.codes, n, d_flag);
  check_kernel("mark_nan_codes");
}

}  // namespace tdiff::hip
