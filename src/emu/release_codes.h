#pragma once
// The release's storage codes as float32, one rule for host and device (formats/release_format.h
// has the float64 definitions and the layouts):
//   e4m3(c)  sign, 4-bit exponent (bias 7), 3-bit mantissa; subnormals m·2^-9; 0x7F/0xFF NaN
//   e2m1(c)  the low 4 bits: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (codes 8..15)
//   e8m0(e)  2^(e - 127) for e = 0..254 (2^-127 is a float32 subnormal, still exact); 0xFF NaN
//   weight = mul_rn(code value, scale)
// Every code value is exact in float32 and the scale is a power of two (or, in the -Base
// checkpoint's F32 container, a float), so the float32 product is the correctly rounded
// float64 product: exactly what the float64 dequantisation gives once converted to float32.
// The GEMM kernels decode weights with these while staging them (hip/gemm.hip), so a GEMM sees
// the operands it would see with the weights dequantised first.
#include <cstdint>

#include "emu/arith.h"

namespace tdiff::arith {

TDIFF_HD inline float e4m3_value(std::uint8_t c) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return bits_float(0x7fc00000u | sign);
  // Normal: (8 + m)·2^(e - 10) = 1.m·2^(e - 7), i.e. float exponent field e - 7 + 127.
  if (e != 0u) return bits_float(sign | ((e + 120u) << 23) | (m << 20));
  return bits_float(sign | float_bits(static_cast<float>(m) * 0.001953125f));  // m·2^-9, exact
}

TDIFF_HD inline float e2m1_value(std::uint8_t c) {
  // Magnitudes of codes 0..7 as float32 bit patterns: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  constexpr std::uint32_t kMagnitude[8] = {0x00000000u, 0x3f000000u, 0x3f800000u, 0x3fc00000u,
                                           0x40000000u, 0x40400000u, 0x40800000u, 0x40c00000u};
  return bits_float(kMagnitude[c & 7u] | (static_cast<std::uint32_t>(c & 8u) << 28));
}

TDIFF_HD inline float e8m0_value(std::uint8_t e) {
  if (e == 0xffu) return bits_float(0x7fc00000u);
  return bits_float(e == 0 ? 0x00400000u : static_cast<std::uint32_t>(e) << 23);
}

}  // namespace tdiff::arith
