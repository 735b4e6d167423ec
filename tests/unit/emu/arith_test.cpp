// The kernels' rounding helpers (emu/arith.h, shared with the HIP kernels) against the
// exact double encoders of base/dtype.h, over a dense sample of all float32 bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "emu/arith.h"

namespace tdiff {
namespace {

template <class F>
void sweep(F&& check) {
  for (std::uint64_t b = 0; b < (1ull << 32); b += 4099) {  // ~1M patterns: every exponent, many mantissas
    float x;
    const auto u = static_cast<std::uint32_t>(b);
    std::memcpy(&x, &u, 4);
    check(x);
  }
}

bool same(float a, double b) { return (std::isnan(a) && std::isnan(b)) || static_cast<double>(a) == b; }

TEST(EmuArith, RoundingMatchesTheExactEncoders) {
  long bad = 0;
  sweep([&](float x) {
    bad += !same(arith::round_f16(x), round_to(x, DType::f16));
    bad += !same(arith::round_bf16(x), round_to(x, DType::bf16));
    bad += !same(arith::round_f8(x), round_to(x, DType::f8_e4m3));
  });
  EXPECT_EQ(bad, 0);
}

TEST(EmuArith, TiesToEvenAndLimits) {
  EXPECT_EQ(arith::round_f16(1.0f + 1.0f / 2048), 1.0f);                 // halfway, even stays
  EXPECT_EQ(arith::round_f16(1.0f + 3.0f / 2048), 1.0f + 2.0f / 1024);   // halfway, rounds to even
  EXPECT_EQ(arith::round_f16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(arith::round_f16(65520.0f)));
  EXPECT_EQ(arith::round_f8(450.0f), 448.0f);
  EXPECT_TRUE(std::isnan(arith::round_f8(464.0f)));
  EXPECT_EQ(arith::round_f8(std::ldexp(1.0f, -9)), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(arith::round_bf16(1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(arith::fma_fmt(2.0f, 3.0f, 1.0f, arith::Fmt::f16), 7.0f);
  EXPECT_EQ(arith::add_fmt(2048.0f, 1.0f, arith::Fmt::f16), 2048.0f);  // fp16 accumulation stalls
}

}  // namespace
}  // namespace tdiff
