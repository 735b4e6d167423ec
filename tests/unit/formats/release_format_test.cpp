// The release storage formats (formats/release_format.h) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "model/config.h"
#include "base/error.h"
#include "formats/release_format.h"
#include "synth/synth.h"
#include "formats/weights.h"
#include "emu/release_codes.h"

namespace tdiff {
namespace {

Tensor bytes(DType t, Shape shape, std::vector<std::uint8_t> v) {
  Tensor out(t, std::move(shape));
  EXPECT_EQ(static_cast<std::size_t>(out.nbytes()), v.size());
  std::memcpy(out.raw(), v.data(), v.size());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ReleaseFormat, E8M0Values) {
  EXPECT_EQ(e8m0_value(127), 1.0);
  EXPECT_EQ(e8m0_value(128), 2.0);
  EXPECT_EQ(e8m0_value(120), 1.0 / 128);
  EXPECT_EQ(e8m0_value(0), std::ldexp(1.0, -127));
  EXPECT_EQ(e8m0_value(254), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(e8m0_value(0xFF)));
}

TEST(ReleaseFormat, E2M1EveryCode) {
  const double want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (std::uint8_t c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_value(c), want[c]) << int(c);
    if (c != 8) {
      EXPECT_EQ(e2m1_code(want[c]), c) << int(c);  // every value encodes to its own code
    }
  }
  // Ties go to the even code (mantissa bit 0): 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  EXPECT_EQ(e2m1_value(e2m1_code(0.25)), 0.0);
  EXPECT_EQ(e2m1_value(e2m1_code(0.75)), 1.0);
  EXPECT_EQ(e2m1_value(e2m1_code(1.25)), 1.0);
  EXPECT_EQ(e2m1_value(e2m1_code(1.75)), 2.0);
  EXPECT_EQ(e2m1_value(e2m1_code(2.5)), 2.0);
  EXPECT_EQ(e2m1_value(e2m1_code(3.5)), 4.0);
  EXPECT_EQ(e2m1_value(e2m1_code(5.0)), 4.0);
  EXPECT_EQ(e2m1_value(e2m1_code(-5.1)), -6.0);
  EXPECT_EQ(e2m1_value(e2m1_code(100.0)), 6.0);  // saturates (the writer's scales never need it)
  EXPECT_EQ(e2m1_code(-std::numeric_limits<double>::infinity()), 15);
  EXPECT_EQ(e2m1_code(std::numeric_limits<double>::quiet_NaN()), 0);
}

// The quantiser's rule stated as a search (the nearest magnitude, ties to the even code) and the
// writer's threshold chain agree on every double near each midpoint and on a sweep of [-8, 8].
TEST(ReleaseFormat, E2M1CodeIsTheNearestWithTiesToEven) {
  auto nearest = [](double x) {
    const double a = std::fabs(x);
    std::uint8_t best = 0;
    for (std::uint8_t c = 1; c < 8; ++c) {
      const double d = std::fabs(e2m1_value(c) - a), db = std::fabs(e2m1_value(best) - a);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return std::signbit(x) && best != 0 ? static_cast<std::uint8_t>(best | 8u) : best;
  };
  std::vector<double> xs;
  for (const double m : {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.0})
    for (const double sign : {1.0, -1.0}) {
      double below = m, above = m;
      for (int i = 0; i < 4; ++i) below = std::nextafter(below, -10.0), above = std::nextafter(above, 10.0);
      for (double v = below; v <= above; v = std::nextafter(v, 10.0)) xs.push_back(sign * v);
    }
  for (int i = -80000; i <= 80000; ++i) xs.push_back(i / 10000.0 + 1e-9 * (i % 7));
  for (const double x : xs) ASSERT_EQ(e2m1_code(x), nearest(x)) << x;
}

TEST(ReleaseFormat, ScaleExponents) {
  EXPECT_EQ(e8m0_exponent_for(448.0, 448.0), 127);  // exactly the largest code at scale 1
  EXPECT_EQ(e8m0_exponent_for(448.5, 448.0), 128);
  EXPECT_EQ(e8m0_exponent_for(224.0, 448.0), 126);
  EXPECT_EQ(e8m0_exponent_for(1.0, 6.0), 125);  // 1 / 2^-2 = 4 <= 6, 1 / 2^-3 = 8 > 6
  EXPECT_EQ(e8m0_exponent_for(0.0, 6.0), 127);
  EXPECT_EQ(e8m0_exponent_for(0.02, 448.0), 127 - 14);  // 0.02 * 2^15 = 655 > 448, * 2^14 = 328 <= 448
}

TEST(ReleaseFormat, Fp8HandComputed) {
  // [2, 3]: subnormal 0x01 = 2^-9, smallest normal 0x08 = 2^-6, max 0x7E = 448, its negative,
  // 0x38 = 1.0, 0x00 = 0; scale e = 125 (x 1/4).
  const Tensor codes = bytes(DType::f8_e4m3, {2, 3}, {0x01, 0x08, 0x7E, 0xFE, 0x38, 0x00});
  const Tensor scale = bytes(DType::u8, {1, 1}, {125});
  const Tensor w = dequantize_fp8(codes, scale, "w");
  const double* v = w.data<double>();
  EXPECT_EQ(v[0], std::ldexp(1.0, -9) / 4);
  EXPECT_EQ(v[1], std::ldexp(1.0, -6) / 4);
  EXPECT_EQ(v[2], 448.0 / 4);
  EXPECT_EQ(v[3], -448.0 / 4);
  EXPECT_EQ(v[4], 0.25);
  EXPECT_EQ(v[5], 0.0);
}

TEST(ReleaseFormat, Fp8BlocksNotMultiplesOf128) {
  // [130, 200]: blocks (0,0) (0,1) (1,0) (1,1) with their own scales; each element 1.0 (0x38).
  const std::int64_t O = 130, K = 200;
  std::vector<std::uint8_t> c(static_cast<std::size_t>(O * K), 0x38);
  const Tensor w = dequantize_fp8(bytes(DType::f8_e4m3, {O, K}, c), bytes(DType::u8, {2, 2}, {127, 128, 126, 130}), "w");
  const double* v = w.data<double>();
  EXPECT_EQ(v[0 * K + 0], 1.0);
  EXPECT_EQ(v[127 * K + 127], 1.0);
  EXPECT_EQ(v[0 * K + 128], 2.0);
  EXPECT_EQ(v[127 * K + 199], 2.0);
  EXPECT_EQ(v[128 * K + 0], 0.5);
  EXPECT_EQ(v[129 * K + 127], 0.5);
  EXPECT_EQ(v[128 * K + 128], 8.0);
  EXPECT_EQ(v[129 * K + 199], 8.0);
  // The -Base checkpoint's F32 scale containers give the same values.
  Tensor f(DType::f32, {2, 2});
  const float fs[4] = {1.0f, 2.0f, 0.5f, 8.0f};
  std::memcpy(f.raw(), fs, sizeof fs);
  const Tensor w32 = dequantize_fp8(bytes(DType::f8_e4m3, {O, K}, c), f, "w");
  EXPECT_EQ(std::memcmp(w.raw(), w32.raw(), static_cast<std::size_t>(w.nbytes())), 0);
}

TEST(ReleaseFormat, Fp8ErrorsNameTheTensor) {
  const Tensor scale = bytes(DType::u8, {1, 1}, {127});
  // 0x7F and 0xFF are the NaN codes.
  EXPECT_NE(error_of([&] { dequantize_fp8(bytes(DType::f8_e4m3, {1, 2}, {0x38, 0x7F}), scale, "layers.0.attn.wq_a.weight"); })
                .find("layers.0.attn.wq_a.weight: element [0, 1] is an FP8 NaN code (0x7F)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dequantize_fp8(bytes(DType::f8_e4m3, {1, 1}, {0xFF}), scale, "x"); }).find("NaN code (0xFF)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dequantize_fp8(bytes(DType::f8_e4m3, {1, 1}, {0x38}), bytes(DType::u8, {1, 2}, {127, 127}), "x.weight"); })
                .find("x.weight: scale has shape [1,2], the weight needs [1,1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dequantize_fp8(bytes(DType::f8_e4m3, {1, 1}, {0x38}), bytes(DType::u8, {1, 1}, {0xFF}), "x"); })
                .find("x: scale [0, 0] is nan"),
            std::string::npos);
}

// A weight of no rows and 2^63 - 1 columns holds no bytes, so a file's size checks pass it: the
// scale shape it needs is still computed without overflow (found by fuzz_release_scales).
TEST(ReleaseFormat, EmptyWeightOfHugeWidthIsCheckedWithoutOverflow) {
  const std::int64_t k = std::numeric_limits<std::int64_t>::max();
  EXPECT_NE(error_of([&] { dequantize_fp8(Tensor(DType::f8_e4m3, {0, k}), bytes(DType::u8, {1, 1}, {127}), "w"); })
                .find("w: scale has shape [1,1], the weight needs [0,72057594037927936]"),
            std::string::npos);
}

TEST(ReleaseFormat, Fp4EveryCodeBothNibbles) {
  // One row, K = 32: byte t holds columns 2t (low nibble) and 2t+1 (high nibble). Bytes 0..7
  // put codes 0..15 in the low nibbles and 15..0 in the high ones; scale e = 128 (x 2).
  std::vector<std::uint8_t> packed(16);
  for (int t = 0; t < 16; ++t) packed[static_cast<std::size_t>(t)] = static_cast<std::uint8_t>((t & 15) | ((15 - t) << 4));
  std::vector<double> out(32);
  dequantize_fp4(bytes(DType::u8, {1, 16}, packed), bytes(DType::u8, {1, 1}, {128}), 32, out.data(), "e");
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(out[static_cast<std::size_t>(2 * t)], 2 * e2m1_value(static_cast<std::uint8_t>(t))) << t;
    EXPECT_EQ(out[static_cast<std::size_t>(2 * t + 1)], 2 * e2m1_value(static_cast<std::uint8_t>(15 - t))) << t;
  }
}

TEST(ReleaseFormat, Fp4GroupsNotMultiplesOf32) {
  // Two rows of K = 37 columns (19 bytes, the last high nibble unused): groups [0, 32) and
  // [32, 37) have their own scales; every code 2 (= 1.0).
  const std::int64_t K = 37;
  std::vector<std::uint8_t> packed(2 * 19, 0x22);
  std::vector<double> out(static_cast<std::size_t>(2 * K));
  dequantize_fp4(bytes(DType::u8, {2, 19}, packed), bytes(DType::u8, {2, 2}, {127, 129, 126, 125}), K, out.data(), "e");
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[31], 1.0);
  EXPECT_EQ(out[32], 4.0);
  EXPECT_EQ(out[36], 4.0);
  EXPECT_EQ(out[K + 0], 0.5);
  EXPECT_EQ(out[K + 36], 0.25);
  EXPECT_NE(error_of([&] { dequantize_fp4(bytes(DType::u8, {2, 19}, packed), bytes(DType::u8, {2, 1}, {127, 127}), K, out.data(), "w2"); })
                .find("w2: scale has shape [2,1], the weight needs [2,2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dequantize_fp4(bytes(DType::u8, {2, 19}, packed), bytes(DType::u8, {2, 2}, {127, 127, 127, 127}), 40, out.data(), "w2"); })
                .find("w2: FP4 weight must be 2-D I8 [rows, 20]"),
            std::string::npos);
}

TEST(ReleaseFormat, Fp4ColumnPiecesAreThoseColumnsOfTheWhole) {
  // Three rows of K = 100 with varied codes and scales; pieces across group boundaries.
  const std::int64_t K = 100, R = 3;
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * 50)), scales(static_cast<std::size_t>(R * 4));
  for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<std::uint8_t>((i * 37 + 11) & 0x77);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(124 + i % 6);
  const Tensor codes = bytes(DType::u8, {R, 50}, packed), scale = bytes(DType::u8, {R, 4}, scales);
  std::vector<double> whole(static_cast<std::size_t>(R * K));
  dequantize_fp4(codes, scale, K, whole.data(), "e");
  for (const auto& [c0, c1] : {std::pair<std::int64_t, std::int64_t>{0, 40}, {40, 66}, {66, 100}, {30, 34}}) {
    std::vector<double> piece(static_cast<std::size_t>(R * (c1 - c0)));
    dequantize_fp4(codes, scale, K, piece.data(), "e", c0, c1);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t k = c0; k < c1; ++k) ASSERT_EQ(piece[r * (c1 - c0) + k - c0], whole[r * K + k]) << r << "," << k;
  }
}

TEST(ReleaseFormat, NamesFollowTheSpec) {
  EXPECT_EQ(release_name("model.embed_tokens.weight")->name, "embed.weight");
  EXPECT_EQ(release_name("lm_head.weight")->name, "head.weight");
  EXPECT_EQ(release_name("model.hc_head.hc_fn")->name, "hc_head_fn");
  EXPECT_EQ(release_name("model.layers.3.self_attn.q_a_proj.weight")->name, "layers.3.attn.wq_a.weight");
  EXPECT_EQ(release_name("model.layers.3.self_attn.q_a_proj.weight")->format, ReleaseFormat::fp8);
  EXPECT_EQ(release_name("model.layers.12.self_attn.compressor.indexer.scorer.weights_proj.weight")->name,
            "layers.12.attn.indexer.weights_proj.weight");
  EXPECT_EQ(release_name("model.layers.2.self_attn.compressor.kv_norm.weight")->name, "layers.2.attn.compressor.norm.weight");
  EXPECT_EQ(release_name("model.layers.4.mlp.gate.e_score_correction_bias")->name, "layers.4.ffn.gate.bias");
  EXPECT_EQ(release_name("model.layers.4.mlp.shared_experts.down_proj.weight")->name, "layers.4.ffn.shared_experts.w2.weight");
  const auto experts = release_name("model.layers.4.mlp.experts.gate_up_proj");
  EXPECT_EQ(experts->format, ReleaseFormat::fp4);
  EXPECT_EQ(experts->parts, (std::vector<std::string>{"w1", "w3"}));
  EXPECT_EQ(hf_name("layers.4.ffn.experts.17.w3.weight"), "model.layers.4.mlp.experts.gate_up_proj");
  EXPECT_EQ(hf_name("layers.4.ffn.experts.17.w2.weight"), "model.layers.4.mlp.experts.down_proj");
  EXPECT_EQ(hf_name("norm.weight"), "model.norm.weight");
  EXPECT_EQ(hf_name("mtp.0.emb.weight"), std::nullopt);
  EXPECT_EQ(hf_name("layers.3.attn.wq_a.scale"), std::nullopt);
  EXPECT_EQ(scale_name("layers.3.attn.wq_a.weight"), "layers.3.attn.wq_a.scale");
  // Every parameter of a model with every layer and MoE type maps there and back.
  ModelConfig c = synth_preset("tiny");
  for (const auto& [hf, spec] : expected_weights(c)) {
    const auto rn = release_name(hf);
    ASSERT_TRUE(rn) << hf;
    const std::string probe = rn->format == ReleaseFormat::fp4 ? rn->name + "0." + rn->parts[0] + ".weight" : rn->name;
    EXPECT_EQ(hf_name(probe), hf) << probe;
  }
}

// The float32 decode the GPU kernels use (emu/release_codes.h) gives, for every code and every
// scale exponent, the float64 dequantisation converted to float32, bit for bit: the GEMM
// operands of a release checkpoint do not depend on where it was dequantised.
TEST(ReleaseFormat, Float32DecodeEqualsFloat64ForEveryCodeAndScale) {
  int compared = 0;
  for (int e = 0; e < 255; ++e) {
    const auto s = static_cast<std::uint8_t>(e);
    ASSERT_EQ(arith::float_bits(arith::e8m0_value(s)), arith::float_bits(static_cast<float>(e8m0_value(s)))) << e;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const double exact = f8e4m3_value(code) * e8m0_value(s);
      const float got = arith::mul_rn(arith::e4m3_value(code), arith::e8m0_value(s));
      if (std::isnan(exact)) {
        EXPECT_TRUE(std::isnan(got)) << c;
        continue;
      }
      ASSERT_EQ(arith::float_bits(got), arith::float_bits(static_cast<float>(exact))) << "e4m3 " << c << " scale " << e;
      ++compared;
    }
    for (int c = 0; c < 16; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const float got = arith::mul_rn(arith::e2m1_value(code), arith::e8m0_value(s));
      ASSERT_EQ(arith::float_bits(got), arith::float_bits(static_cast<float>(e2m1_value(code) * e8m0_value(s))))
          << "e2m1 " << c << " scale " << e;
      ++compared;
    }
  }
  EXPECT_TRUE(std::isnan(arith::e8m0_value(0xFF)));
  EXPECT_EQ(compared, 255 * (254 + 16));  // every finite e4m3 code (two NaN codes) and every e2m1 code
  // The F32-container scale (any float): still the rounded exact product.
  for (const float scale : {0.37f, 3.0e-39f, 1.0e38f, -2.5f}) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      if (std::isnan(f8e4m3_value(code))) continue;
      ASSERT_EQ(arith::float_bits(arith::mul_rn(arith::e4m3_value(code), scale)),
                arith::float_bits(static_cast<float>(f8e4m3_value(code) * static_cast<double>(scale))))
          << c << " " << scale;
    }
  }
}

}  // namespace
}  // namespace tdiff
