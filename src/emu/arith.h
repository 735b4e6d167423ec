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
#if defined(__CUDACC__) && !defined(__HIP__)
#include <cuda_fp16.h>  // round_f16_pair's NVIDIA device path
#define TDIFF_NVIDIA_DEVICE_HALF 1
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

// round_f16 of two values at once: the rule above, with NVIDIA's device path in the
// hardware's paired conversion (cvt.rn.f16x2.f32: to nearest even, overflow to inf, fp16
// subnormals kept, so the same bits; NaN kept as it came, as round_f16 keeps it). About a
// sixth of the instructions of two round_f16 calls, where a GEMM with an fp16 accumulator
// rounds after every product. Elsewhere (the host, AMD, whose paired conversion rounds
// toward zero) it is round_f16 twice. A GPU test checks it on every float bit pattern.
TDIFF_HD inline void round_f16_pair(float& a, float& b) {
#if defined(TDIFF_NVIDIA_DEVICE_HALF) && defined(__CUDA_ARCH__)
  const float2 r = __half22float2(__floats2half2_rn(a, b));
  a = a != a ? a : r.x;
  b = b != b ? b : r.y;
#else
  a = round_f16(a);
  b = round_f16(b);
#endif
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
// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c since 2.28, as its x86-64 FMA build computes
// it: r = fma(x·N/ln2 − k) and the polynomial fused), in double arithmetic that every IEEE
// device reproduces: on the host it equals std::exp(float) of glibc for all 2^32 inputs
// (checked exhaustively against glibc 2.36 on an FMA CPU; the plain-SSE2 build of glibc
// differs in 2 inputs). The kernels use it so that they and emu's std::exp agree bit for bit
// — the vendors' expf is 1-2 ulp off and even exp in double, correctly rounded, differs from
// glibc in ~4e-5 of the inputs.
namespace detail {
TDIFF_HD inline std::uint64_t exp2f_table(unsigned i) {  // bits(2^(i/32)) − (i << 47)
  switch (i) {
    case 0: return 0x3ff0000000000000ull; case 1: return 0x3fefd9b0d3158574ull;
    case 2: return 0x3fefb5586cf9890full; case 3: return 0x3fef9301d0125b51ull;
    case 4: return 0x3fef72b83c7d517bull; case 5: return 0x3fef54873168b9aaull;
    case 6: return 0x3fef387a6e756238ull; case 7: return 0x3fef1e9df51fdee1ull;
    case 8: return 0x3fef06fe0a31b715ull; case 9: return 0x3feef1a7373aa9cbull;
    case 10: return 0x3feedea64c123422ull; case 11: return 0x3feece086061892dull;
    case 12: return 0x3feebfdad5362a27ull; case 13: return 0x3feeb42b569d4f82ull;
    case 14: return 0x3feeab07dd485429ull; case 15: return 0x3feea47eb03a5585ull;
    case 16: return 0x3feea09e667f3bcdull; case 17: return 0x3fee9f75e8ec5f74ull;
    case 18: return 0x3feea11473eb0187ull; case 19: return 0x3feea589994cce13ull;
    case 20: return 0x3feeace5422aa0dbull; case 21: return 0x3feeb737b0cdc5e5ull;
    case 22: return 0x3feec49182a3f090ull; case 23: return 0x3feed503b23e255dull;
    case 24: return 0x3feee89f995ad3adull; case 25: return 0x3feeff76f2fb5e47ull;
    case 26: return 0x3fef199bdd85529cull; case 27: return 0x3fef3720dcef9069ull;
    case 28: return 0x3fef5818dcfba487ull; case 29: return 0x3fef7c97337b9b5full;
    case 30: return 0x3fefa4afa2a490daull; default: return 0x3fefd0765b6e4540ull;
  }
}
// Double operations rounded as written (no contraction) and one explicit fused multiply-add.
TDIFF_HD inline double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  return a * b;
#endif
}
TDIFF_HD inline double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  return a + b;
#endif
}
TDIFF_HD inline double dfma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
}  // namespace detail

TDIFF_HD inline float expf_glibc(float x) {
  constexpr double kN = 32, kInvLn2N = 0x1.71547652b82fep+0 * kN, kShift = 0x1.8p+52;
  constexpr double kC0 = 0x1.c6af84b912394p-5 / kN / kN / kN, kC1 = 0x1.ebfce50fac4f3p-3 / kN / kN,
                   kC2 = 0x1.62e42ff0c52d6p-1 / kN;
  const std::uint32_t abstop = (float_bits(x) >> 20) & 0x7ffu;
  if (abstop >= (float_bits(88.0f) >> 20)) {  // |x| >= 88, or inf / NaN
    if (float_bits(x) == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8u) return x + x;
    if (x > 0x1.62e42ep6f) return bits_float(0x7f800000u);  // overflow: +inf
    if (x < -0x1.9fe368p6f) return 0.0f;                    // underflow
  }
  const double xd = x;
  const double z = detail::dmul_rn(kInvLn2N, xd);
  double kd = detail::dadd_rn(z, kShift);  // round to an integer k, k in the low bits
  std::uint64_t ki, t;
  std::memcpy(&ki, &kd, 8);
  kd = detail::dadd_rn(kd, -kShift);
  const double r = detail::dfma(kInvLn2N, xd, -kd);
  t = detail::exp2f_table(static_cast<unsigned>(ki % 32)) + (ki << 47);
  double s;
  std::memcpy(&s, &t, 8);
  const double p = detail::dfma(kC0, r, kC1), r2 = detail::dmul_rn(r, r);
  double y = detail::dfma(kC2, r, 1.0);
  y = detail::dfma(p, r2, y);
  return static_cast<float>(detail::dmul_rn(y, s));
}

// expf as emu calls it: std::exp on float on the host, glibc's algorithm on the device.
TDIFF_HD inline float exp_f32(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return expf_glibc(x);
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
