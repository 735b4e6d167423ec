#pragma once
// A release weight's codes decoded on the device (included by .hip sources only): the float32
// value of code x scale (emu/release_codes.h), and its 16-bit operand pattern as the
// matrix-core kernels stage it (QuantWeight in gemm.h). weight_codes.hip decodes whole
// weights with these; gemm_matrix_cores.hip four codes at a time on their way to LDS.
#include <cstdint>

#include "emu/release_codes.h"
#include "hip/gemm.h"
#include "hip/kernel_common.h"

namespace tdiff::hip::gemm_detail {

// One float32 weight value of a release weight (row, column), as the GEMM kernels decode it.
__device__ inline float decoded(const QuantWeight& q, std::int64_t row, std::int64_t k, std::int64_t K) {
  if (q.format == QuantWeight::Format::fp8)
    return arith::mul_rn(arith::e4m3_value(q.codes[row * K + k]), q.block_scale[(row / 128) * ((K + 127) / 128) + k / 128]);
  const std::uint8_t pair = q.codes[row * ((K + 1) / 2) + k / 2];
  return arith::mul_rn(arith::e2m1_value(static_cast<std::uint8_t>(pair >> (4 * (k % 2)))), arith::e8m0_value(q.e8m0[row * ((K + 31) / 32) + k / 32]));
}

// The weight operand of the register-staged matrix-core kernel as the release stores it:
// FP8 codes [rows, K] with float scales per 128 x 128 block, or FP4 code pairs [rows,
// ceil(K/2)] with E8M0 scales per 1 x 32 group. Rows of every group stacked: group g's row o
// is row g * group_rows + o.
struct Fp8Codes {
  const std::uint8_t* codes;
  const float* block_scale;  // [ceil(rows/128), scale_ld]
  std::int64_t scale_ld;     // ceil(K/128)
  std::int64_t group_rows;   // rows of one group's weight
  bool vec4;                 // four consecutive codes load as one word (K % 4 == 0, aligned)
};
struct Fp4Codes {
  const std::uint8_t* codes;
  const std::uint8_t* e8m0;  // [rows, scale_ld]
  std::int64_t scale_ld;     // ceil(K/32)
  std::int64_t group_rows;
  bool vec4;  // four consecutive codes load as one 16-bit word (K % 4 == 0, aligned)
};

// The 16-bit operand pattern of one decoded weight: the float32 value of code x scale
// (emu/release_codes.h), rounded as an operand as quantize_weight rounds a loaded weight.
template <bool kBf16>
__device__ inline unsigned quant_bits(float code, float scale) {
  return mma::bits16(arith::mfma_operand(arith::mul_rn(code, scale), kBf16 ? Fmt::bf16 : Fmt::f16), kBf16);
}

// The bf16 pattern of a code value times 2^s, when the product is a normal bf16 number: the
// exponent field of the value's pattern moved by s (the same bits as quant_bits, which
// rounds an exact product: tested). Zero stays zero.
__device__ inline unsigned scaled_bf16(unsigned value_bits, int s) {
  return (value_bits & 0x7fffu) == 0 ? value_bits : static_cast<unsigned>(static_cast<int>(value_bits) + s * 128);
}
// The bf16 pattern of e2m1 code c (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), without a table.
__device__ inline unsigned e2m1_bf16(unsigned c) {
  const unsigned m = c & 7u;
  const unsigned mag = m == 0 ? 0u : m == 1 ? 0x3f00u : ((126u + (m >> 1)) << 7) | ((m & 1u) << 6);
  return mag | ((c & 8u) << 12);
}

// Weights k .. k + 3 of weight row `row` (zeros outside the row or K), decoded. bf16 operands
// of power-of-two scales that keep every value of the block normal in bf16 (float scales
// 2^-117..2^119 here, E8M0 exponents 2..252 for FP4) take the exponent shift, a few integer
// operations a weight; everything else (fp16 operands, other scales) the general rule.
template <bool kBf16>
__device__ inline uint2 fetch4_codes(const Fp8Codes& w, std::int64_t row, std::int64_t k, std::int64_t K, bool valid) {
  unsigned v[4] = {0u, 0u, 0u, 0u};
  if (valid) {
    const std::uint8_t* codes = w.codes + row * K;
    const float* scale = w.block_scale + (row / 128) * w.scale_ld;
    if (w.vec4 && k + 3 < K) {  // k % 4 == 0: one 128-column block
      const std::uint32_t c4 = *reinterpret_cast<const std::uint32_t*>(codes + k);
      const float sc = scale[k / 128];
      const std::uint32_t sb = arith::float_bits(sc);
      const int field = static_cast<int>(sb >> 23);
      if (kBf16 && (sb & 0x807fffffu) == 0 && field >= 10 && field <= 246) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          v[j] = scaled_bf16(arith::float_bits(arith::e4m3_value(static_cast<std::uint8_t>(c4 >> (8 * j)))) >> 16, field - 127);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = quant_bits<kBf16>(arith::e4m3_value(static_cast<std::uint8_t>(c4 >> (8 * j))), sc);
      }
    } else {
      for (int j = 0; j < 4; ++j)
        if (k + j < K) v[j] = quant_bits<kBf16>(arith::e4m3_value(codes[k + j]), scale[(k + j) / 128]);
    }
  }
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
}
template <bool kBf16>
__device__ inline uint2 fetch4_codes(const Fp4Codes& w, std::int64_t row, std::int64_t k, std::int64_t K, bool valid) {
  unsigned v[4] = {0u, 0u, 0u, 0u};
  if (valid) {
    const std::uint8_t* codes = w.codes + row * ((K + 1) / 2);
    const std::uint8_t* e8m0 = w.e8m0 + row * w.scale_ld;
    if (w.vec4 && k + 3 < K) {  // k % 4 == 0: two whole bytes in one 32-column group
      const unsigned c4 = *reinterpret_cast<const std::uint16_t*>(codes + k / 2);
      const int e = e8m0[k / 32];
      if (kBf16 && e >= 2 && e <= 252) {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = scaled_bf16(e2m1_bf16(c4 >> (4 * j)), e - 127);
      } else {
        const float sc = arith::e8m0_value(static_cast<std::uint8_t>(e));
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = quant_bits<kBf16>(arith::e2m1_value(static_cast<std::uint8_t>(c4 >> (4 * j))), sc);
      }
    } else {
      for (int j = 0; j < 4; ++j) {
        const std::int64_t c = k + j;
        if (c < K)
          v[j] = quant_bits<kBf16>(arith::e2m1_value(static_cast<std::uint8_t>(codes[c / 2] >> (4 * (c % 2)))),
                                   arith::e8m0_value(e8m0[c / 32]));
      }
    }
  }
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
}

}  // namespace tdiff::hip::gemm_detail
