// Exhaustive checks of the small-float codecs (base/dtype.h) against independent decoders:
// the compiler's half type for f16, float32 bit shifts for bf16, and ldexp for f8_e4m3.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "base/dtype.h"
#include "base/tensor.h"

namespace tdiff {
namespace {

// The compiler's IEEE half: _Float16, or __fp16 on clang before 15, which has no _Float16 on
// x86 (a storage-only half with the same conversions, each rounded once).
#if defined(__clang__) && __clang_major__ < 15
using compiler_half = __fp16;
#else
using compiler_half = _Float16;
#endif

double f16_compiler(std::uint16_t b) {
  compiler_half h;
  std::memcpy(&h, &b, 2);
  return static_cast<double>(h);
}

std::uint16_t f16_compiler_bits(double x) {
  const compiler_half h = static_cast<compiler_half>(x);  // rounds double -> half once
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// Independent decoding of an IEEE half from its fields.
double f16_fields(std::uint16_t b) {
  const int s = b >> 15, e = b >> 10 & 0x1F, m = b & 0x3FF;
  double v;
  if (e == 0x1F) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

bool same_or_both_nan(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

TEST(DTypeF16, DecodeAllPatterns) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto u = static_cast<std::uint16_t>(b);
    const double v = f16_value(u);
    ASSERT_TRUE(same_or_both_nan(v, f16_compiler(u))) << std::hex << b;
    ASSERT_TRUE(same_or_both_nan(v, f16_fields(u))) << std::hex << b;
    if (!std::isnan(v)) ASSERT_EQ(std::signbit(v), (b & 0x8000) != 0) << std::hex << b;  // -0 kept
  }
}

TEST(DTypeF16, EncodeRoundTripsEveryNonNaN) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto u = static_cast<std::uint16_t>(b);
    const double v = f16_value(u);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_value(f16_bits(v)))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(f16_bits(v), u) << std::hex << b;
  }
}

// Midpoints between neighbours round to the one with an even mantissa; a hair off the
// midpoint rounds to the nearer one. Also compared with the compiler's conversion.
TEST(DTypeF16, MidpointsTieToEven) {
  for (std::uint32_t b = 0; b < 0x7BFF; ++b) {  // positive finite values below the maximum
    const double lo = f16_value(static_cast<std::uint16_t>(b));
    const double hi = f16_value(static_cast<std::uint16_t>(b + 1));
    const double mid = (lo + hi) / 2;  // exact in double
    const std::uint16_t even = (b & 1) == 0 ? static_cast<std::uint16_t>(b) : static_cast<std::uint16_t>(b + 1);
    ASSERT_EQ(f16_bits(mid), even) << std::hex << b;
    ASSERT_EQ(f16_bits(-mid), even | 0x8000) << std::hex << b;
    ASSERT_EQ(f16_bits(mid), f16_compiler_bits(mid)) << std::hex << b;
    const double below = std::nextafter(mid, 0.0), above = std::nextafter(mid, 1e9);
    ASSERT_EQ(f16_bits(below), b) << std::hex << b;
    ASSERT_EQ(f16_bits(above), b + 1) << std::hex << b;
  }
}

TEST(DTypeF16, OverflowAndUnderflow) {
  EXPECT_EQ(f16_value(f16_bits(65504.0)), 65504.0);
  EXPECT_EQ(f16_bits(65519.99), 0x7BFF);  // below the midpoint to 65536: stays finite
  EXPECT_EQ(f16_bits(65520.0), 0x7C00);   // the midpoint ties to "even" = infinity
  EXPECT_EQ(f16_bits(1e300), 0x7C00);
  EXPECT_EQ(f16_bits(-1e300), 0xFC00);
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -25)), 0x0000);  // half the smallest subnormal: ties to 0
  EXPECT_EQ(f16_bits(std::ldexp(1.5, -25)), 0x0001);
  EXPECT_EQ(f16_bits(std::ldexp(3.0, -25)), 0x0002);  // 1.5 quanta: tie to even (2)
  EXPECT_EQ(f16_bits(-0.0), 0x8000);
}

TEST(DTypeF16, RandomDoublesMatchCompiler) {
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int> ex(-30, 17);
  std::uniform_real_distribution<double> man(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(man(rng), ex(rng));
    if (i & 1) x = -x;
    ASSERT_EQ(f16_bits(x), f16_compiler_bits(x)) << x;
    ASSERT_EQ(round_to(x, DType::f16), f16_compiler(f16_compiler_bits(x))) << x;
  }
}

// bf16 is the top half of a float32.
double bf16_shift(std::uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16));
}

// The classic float32 -> bf16 round-to-nearest-even bit trick (exact for float32 inputs).
std::uint16_t bf16_trick(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

TEST(DTypeBF16, DecodeAllPatterns) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto u = static_cast<std::uint16_t>(b);
    ASSERT_TRUE(same_or_both_nan(bf16_value(u), bf16_shift(u))) << std::hex << b;
    if (!std::isnan(bf16_value(u))) ASSERT_EQ(bf16_bits(bf16_value(u)), u) << std::hex << b;
  }
}

TEST(DTypeBF16, EncodeMatchesFloat32BitTrick) {
  // Every bf16 pattern extended with low halves that hit: exact, just below/at/above the
  // midpoint, and the extremes. Ties to even, and overflow to infinity, come out of the trick.
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
  for (std::uint32_t b = 0; b < 65536; ++b) {
    for (std::uint32_t lo : lows) {
      const std::uint32_t u = b << 16 | lo;
      const float f = std::bit_cast<float>(u);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(bf16_value(bf16_bits(f)))) << std::hex << u;  // NaN stays NaN
        continue;
      }
      ASSERT_EQ(bf16_bits(f), bf16_trick(f)) << std::hex << u;
    }
  }
  EXPECT_EQ(bf16_bits(3.4e38), 0x7F80);  // above the largest bf16 (3.3895e38) by more than half a step
  EXPECT_EQ(bf16_bits(-1e39), 0xFF80);
  EXPECT_EQ(bf16_bits(std::numeric_limits<double>::infinity()), 0x7F80);
}

double f8_fields(std::uint8_t b) {
  const int s = b >> 7, e = b >> 3 & 0xF, m = b & 7;
  double v;
  if (e == 0xF && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(m, -9);  // subnormal steps of 2^-9
  else v = std::ldexp(8 + m, e - 10);
  return s ? -v : v;
}

TEST(DTypeF8E4M3, AllPatterns) {
  for (std::uint32_t b = 0; b < 256; ++b) {
    const auto u = static_cast<std::uint8_t>(b);
    const double v = f8e4m3_value(u);
    ASSERT_TRUE(same_or_both_nan(v, f8_fields(u))) << std::hex << b;
    if (!std::isnan(v)) ASSERT_EQ(f8e4m3_bits(v), u) << std::hex << b;
  }
  EXPECT_TRUE(std::isnan(f8e4m3_value(0x7F)));
  EXPECT_TRUE(std::isnan(f8e4m3_value(0xFF)));
  EXPECT_EQ(f8e4m3_value(0x7E), 448.0);
  EXPECT_EQ(f8e4m3_value(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(f8e4m3_value(0x07), 7 * std::ldexp(1.0, -9));
  EXPECT_EQ(f8e4m3_value(0x08), std::ldexp(1.0, -6));  // smallest normal
}

TEST(DTypeF8E4M3, RoundingAndSaturation) {
  EXPECT_EQ(f8e4m3_bits(450.0), 0x7E);  // -> 448
  EXPECT_EQ(f8e4m3_bits(464.0), 0x7E);  // midpoint 448/480 ties to the even mantissa (448)
  EXPECT_EQ(f8e4m3_bits(-464.0), 0xFE);
  EXPECT_TRUE(std::isnan(f8e4m3_value(f8e4m3_bits(464.5))));  // no infinity: NaN
  EXPECT_TRUE(std::isnan(f8e4m3_value(f8e4m3_bits(1e6))));
  EXPECT_TRUE(std::isnan(f8e4m3_value(f8e4m3_bits(std::numeric_limits<double>::infinity()))));
  EXPECT_EQ(f8e4m3_bits(std::ldexp(1.0, -10)), 0x00);   // half the smallest subnormal: ties to 0
  EXPECT_EQ(f8e4m3_bits(std::ldexp(3.0, -10)), 0x02);   // 1.5 steps: ties to even
  EXPECT_EQ(f8e4m3_bits(std::ldexp(1.1, -10)), 0x01);
  // Midpoints between every pair of positive finite neighbours tie to even.
  for (std::uint32_t b = 0; b < 0x7E; ++b) {
    const double mid = (f8e4m3_value(static_cast<std::uint8_t>(b)) + f8e4m3_value(static_cast<std::uint8_t>(b + 1))) / 2;
    ASSERT_EQ(f8e4m3_bits(mid), (b & 1) ? b + 1 : b) << std::hex << b;
  }
}

TEST(DTypeTensor, ToRoundTrips) {
  Tensor f64(DType::f64, {4, 5});
  auto v = f64.span<double>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - 10) * 0.25;  // exact in f16, bf16 and f8_e4m3
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3}) {
    Tensor back = f64.to(t).to(DType::f64);
    ASSERT_EQ(back.shape(), f64.shape());
    for (std::int64_t i = 0; i < f64.numel(); ++i) ASSERT_EQ(back.value(i), f64.value(i)) << dtype_name(t);
  }
  // Rounding happens once, to nearest even.
  Tensor one(DType::f64, {1});
  one.data<double>()[0] = 1.0 + std::ldexp(1.0, -11);  // f16 midpoint between 1 and 1+2^-10
  EXPECT_EQ(one.to(DType::f16).data<std::uint16_t>()[0], 0x3C00);
  EXPECT_EQ(one.to(DType::f16).value(0), 1.0);
  // Integers and bools convert exactly; float -> int truncates toward zero.
  Tensor ints(DType::i64, {3});
  ints.data<std::int64_t>()[0] = -7;
  ints.data<std::int64_t>()[1] = 0;
  ints.data<std::int64_t>()[2] = (std::int64_t{1} << 53);
  Tensor ib = ints.to(DType::f64).to(DType::i64);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ib.data<std::int64_t>()[i], ints.data<std::int64_t>()[i]);
  Tensor fl(DType::f64, {2});
  fl.data<double>()[0] = -2.9;
  fl.data<double>()[1] = 2.9;
  EXPECT_EQ(fl.to(DType::i32).data<std::int32_t>()[0], -2);
  EXPECT_EQ(fl.to(DType::i32).data<std::int32_t>()[1], 2);
  EXPECT_EQ(fl.to(DType::boolean).value(0), 1.0);
  Tensor nan(DType::f64, {1});
  nan.data<double>()[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_ANY_THROW(nan.to(DType::i64));
  EXPECT_TRUE(std::isnan(nan.to(DType::bf16).value(0)));
}

TEST(DTypeTensor, ColumnsToF64AreExactAndFlagNonFinite) {
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    Tensor w(DType::f64, {3, 5});
    for (std::int64_t i = 0; i < 15; ++i) w.data<double>()[i] = 0.25 * static_cast<double>(i) - 1.0;
    const Tensor n = w.to(t);
    std::vector<double> all(15), cols(9);  // up to 3 columns of 3 rows
    n.to_f64(all.data());
    EXPECT_TRUE(n.cols_to_f64(1, 3, cols.data())) << dtype_name(t);
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 1; c < 3; ++c) EXPECT_EQ(cols[static_cast<std::size_t>(r * 2 + c - 1)], all[static_cast<std::size_t>(r * 5 + c)]);
    for (double bad : {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()}) {
      Tensor v = w.clone();
      v.data<double>()[2 * 5 + 2] = bad;  // row 2, column 2
      const Tensor nv = v.to(t);
      EXPECT_FALSE(nv.cols_to_f64(2, 5, cols.data())) << dtype_name(t);
      EXPECT_TRUE(nv.cols_to_f64(3, 5, cols.data())) << dtype_name(t);  // the bad column not asked
    }
  }
  EXPECT_TRUE(all_finite(nullptr, 0));
  const double big[] = {std::numeric_limits<double>::max(), -0.0, std::numeric_limits<double>::denorm_min()};
  EXPECT_TRUE(all_finite(big, 3));
}

}  // namespace
}  // namespace tdiff
