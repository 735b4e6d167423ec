#pragma once
// Rounding and accumulation helpers shared by the emu backend (host) and the HIP kernels
// (device), so that the two cannot drift apart. Every helper works on float values and
// returns the float that the named storage format would hold (round to nearest even).
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__HIPCC__) || defined(__CUDACC__)
#define TDIFF_HD __host__ __device__
#else
#define TDIFF_HD
#endif

namespace tdiff::arith {

// Storage/accumulation formats a kernel can use (the policy's DType values, GPU side).
enum class Fmt : std::uint8_t { f32 = 0, bf16 = 1, f16 = 2, f8 = 3 };

TDIFF_HD inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
TDIFF_HD inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TDIFF_HD inline float round_bf16(float x) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN unchanged
  u += 0x7fffu + ((u >> 16) & 1u);
  return bits_float(u & 0xffff0000u);
}

// float -> IEEE half -> float, ties to even; overflow to inf, subnormals kept.
TDIFF_HD inline float round_f16(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return x;                       // inf / NaN
  if (a >= 0x477ff000u) return bits_float(sign | 0x7f800000u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                               // below the smallest normal half 2^-14
    // Subnormal half: quantum 2^-24. Scale so the quantum is 1, round, scale back.
    const float q = bits_float(a) * 16777216.0f;       // exact (power of two)
    const float r = q + 12582912.0f - 12582912.0f;       // round to integer, ties to even
    return bits_float(sign | float_bits(r / 16777216.0f));
  }
  // Normal: keep 10 mantissa bits.
  std::uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  r &= 0xffffe000u;
  return bits_float(sign | r);
}

// e4m3fn: max 448, values that round above become NaN; quantum 2^-9 below 2^-6.
TDIFF_HD inline float round_f8(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return bits_float(0x7fc00000u);  // no inf in e4m3fn
  if (a >= 0x43e80000u) return bits_float(0x7fc00000u);  // >= 464 rounds above 448
  if (a < 0x3c800000u) {                                  // below 2^-6: subnormal, quantum 2^-9
    const float q = bits_float(a) * 512.0f;
    const float r = q + 12582912.0f - 12582912.0f;
    return bits_float(sign | float_bits(r / 512.0f));
  }
  std::uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  r &= 0xfff00000u;
  return bits_float(sign | r);
}

TDIFF_HD inline float round_fmt(float x, Fmt f) {
  switch (f) {
    case Fmt::bf16: return round_bf16(x);
    case Fmt::f16: return round_f16(x);
    case Fmt::f8: return round_f8(x);
    default: return x;
  }
}

// gfx90a's fp16 MFMA (v_mfma_*_f16) flushes subnormal operands to zero (AMD: "MI200 MFMA
// behavior specifics"); bf16 subnormals are below 1e-38 and never matter.
TDIFF_HD inline float ftz_f16(float x) { return (x < 6.103515625e-05f && x > -6.103515625e-05f) ? x * 0.0f : x; }
// A value as an MFMA operand of format f reads it: rounded, and flushed if fp16 and subnormal.
TDIFF_HD inline float mfma_operand(float x, Fmt f) {
  const float r = round_fmt(x, f);
  return f == Fmt::f16 ? ftz_f16(r) : r;
}

// float32 operations rounded one at a time, as the host build computes a * b + c (x86-64
// without FMA). nvcc and hipcc contract a·b + c into one FMA by default, even across inlined
// helpers, which would change every sum the kernels share with emu; on the device each
// rounding is spelled out (__fmul_rn / __fadd_rn are never contracted; clang honours the
// pragma per instruction). On the host these are the plain operators, so emu is unchanged.
TDIFF_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  return a * b;
#endif
}
TDIFF_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  return a + b;
#endif
}
TDIFF_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;  // IEEE division on the host and in clang's HIP device code (its default)
#endif
}
TDIFF_HD inline float sqrt_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);  // correctly rounded on the host and in clang's HIP device code
#endif
}
// a·b + c with both roundings (emu's `a * b + c` in float).
TDIFF_HD inline float mul_add_rn(float a, float b, float c) { return add_rn(mul_rn(a, b), c); }
// expf as emu calls it (std::exp on float, glibc: within 0.502 ulp). The device evaluates exp
// in double and rounds once, which is the correctly rounded expf except within ~1e-3 ulp of a
// rounding boundary; the vendors' expf (2 ulp on NVIDIA) would drift from emu far more often.
TDIFF_HD inline float exp_f32(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return static_cast<float>(::exp(static_cast<double>(x)));
#else
  return std::exp(x);
#endif
}

// acc + a·b, the sum stored in the accumulator format. The product of two 16-bit operands is
// exact in float, so a·b + acc in float followed by one rounding models a fused fp16/bf16
// accumulation step (on the host a software fmaf would be far slower and no more exact).
TDIFF_HD inline float fma_fmt(float a, float b, float acc, Fmt f) { return round_fmt(add_rn(mul_rn(a, b), acc), f); }
TDIFF_HD inline float add_fmt(float a, float b, Fmt f) { return round_fmt(add_rn(a, b), f); }
TDIFF_HD inline float mul_fmt(float a, float b, Fmt f) { return round_fmt(mul_rn(a, b), f); }

// The most negative finite value of a storage format (HF's additive mask: finfo.min).
TDIFF_HD inline float finfo_min(Fmt f) {
  switch (f) {
    case Fmt::bf16: return -3.3895313892515355e38f;
    case Fmt::f16: return -65504.0f;
    case Fmt::f8: return -448.0f;
    default: return -3.4028234663852886e38f;
  }
}

// A cheap, well-mixed 64-bit hash (splitmix64 finaliser) for run-dependent orders.
TDIFF_HD inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace tdiff::arith
