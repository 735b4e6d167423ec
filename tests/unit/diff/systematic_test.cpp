// Systematic errors (diff/systematic.h): per-slice fits flag what rounding cannot produce and
// leave rounding alone.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <random>

#include "diff/systematic.h"

namespace tdiff {
namespace {

constexpr std::int64_t kB = 2, kS = 40, kH = 4, kD = 32;
constexpr double kThreshold = 10.0;  // the default of the `systematic` key

// attention's output [B, S, H, d] as the contract names it.
TensorSpec attention_spec() {
  TensorSpec s;
  s.stage = "L02.attn.core";
  s.tensor = "o";
  s.kind = OpKind::attention;
  s.axes = {{"B", kB}, {"S", kS}, {"H", kH}, {"d", kD}};
  return s;
}

Tensor normal_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t(DType::f64, shape);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (auto& v : t.span<double>()) v = dist(gen);
  return t;
}

// What a correct bf16 port stores: the reference rounded to bf16.
Tensor bf16_of(const Tensor& ref) { return ref.to(DType::bf16).to(DType::f64); }

double& at(Tensor& t, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t c) {
  return t.data<double>()[((b * kS + s) * kH + h) * kD + c];
}

SystematicFit fit(const Tensor& ref, const Tensor& cand) {
  const auto layout = slice_layout(attention_spec(), ref.shape(), kS);
  EXPECT_TRUE(layout.has_value());
  return fit_slices("L02.attn.core/o", ref, cand, *layout);
}

TEST(DiffSystematic, LayoutNamesTheContractsAxes) {
  const auto l = slice_layout(attention_spec(), {kB, kS, kH, kD}, kS);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->rows, kB * kS);
  ASSERT_EQ(l->features.size(), 2u);
  EXPECT_EQ(l->features[0].name, "head");
  EXPECT_EQ(l->features[1].name, "ch");
  EXPECT_EQ(l->seq, kS);
  // A dump's real rows [R, H, d]: the same slices, rows numbered among the real tokens.
  const auto real = slice_layout(attention_spec(), {70, kH, kD}, kS);
  ASSERT_TRUE(real);
  EXPECT_TRUE(real->real_rows);
  EXPECT_EQ(real->rows, 70);
  EXPECT_FALSE(slice_layout(attention_spec(), {kB, kS, kD, kH}, kS)) << "trailing axes that are not the spec's";
}

TEST(DiffSystematic, RoundingStaysBelowTheThreshold) {
  const Tensor ref = normal_tensor({kB, kS, kH, kD}, 1);
  const SystematicFit f = fit(ref, bf16_of(ref));
  EXPECT_EQ(f.slices, kB * kS + kH * kD + kH);  // tokens, columns, heads
  ASSERT_FALSE(f.findings.empty());
  EXPECT_LT(f.score(), kThreshold / 2) << finding_text(f, f.findings.front());
}

TEST(DiffSystematic, AHalfPercentScaleOnOneHeadIsNamed) {
  const Tensor ref = normal_tensor({kB, kS, kH, kD}, 2);
  Tensor cand = bf16_of(ref);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t s = 0; s < kS; ++s)
      for (std::int64_t c = 0; c < kD; ++c) at(cand, b, s, 1, c) *= 1.005;
  const SystematicFit f = fit(ref, cand);
  ASSERT_FALSE(f.findings.empty());
  const SliceFinding& top = f.findings.front();
  EXPECT_GT(top.score(), kThreshold);
  EXPECT_EQ(top.fault, SliceFault::scale);
  EXPECT_EQ(top.slice, "head 1");
  EXPECT_NEAR(top.value, 1.005, 3 * top.se);
  EXPECT_EQ(finding_text(f, top).rfind("head 1 of L02.attn.core/o scaled by 1.00", 0), 0u) << finding_text(f, top);
}

TEST(DiffSystematic, ABiasOnOneChannelIsNamed) {
  const Tensor ref = normal_tensor({kB, kS, kH, kD}, 3);
  Tensor cand = bf16_of(ref);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t s = 0; s < kS; ++s) at(cand, b, s, 2, 5) += 0.02;
  const SystematicFit f = fit(ref, cand);
  ASSERT_FALSE(f.findings.empty());
  const SliceFinding& top = f.findings.front();
  EXPECT_GT(top.score(), kThreshold);
  EXPECT_EQ(top.fault, SliceFault::offset);
  EXPECT_EQ(top.slice, "head 2, ch 5");
  EXPECT_NEAR(top.value, 0.02, 3 * top.se);
}

TEST(DiffSystematic, ATokenRowShiftedIsNamed) {
  const Tensor ref = normal_tensor({kB, kS, kH, kD}, 4);
  Tensor cand = bf16_of(ref);
  for (std::int64_t h = 0; h < kH; ++h)
    for (std::int64_t c = 0; c < kD; ++c) at(cand, 1, 13, h, c) += 0.01;
  const SystematicFit f = fit(ref, cand);
  ASSERT_FALSE(f.findings.empty());
  EXPECT_GT(f.score(), kThreshold);
  EXPECT_EQ(f.findings.front().slice, "row 1, token 13");
  EXPECT_EQ(f.findings.front().fault, SliceFault::offset);
}

TEST(DiffSystematic, TwoSwappedHeadsAreNamedTogether) {
  const Tensor ref = normal_tensor({kB, kS, kH, kD}, 5);
  Tensor cand = bf16_of(ref);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t s = 0; s < kS; ++s)
      for (std::int64_t c = 0; c < kD; ++c) std::swap(at(cand, b, s, 1, c), at(cand, b, s, 2, c));
  const SystematicFit f = fit(ref, cand);
  bool named = false;
  for (const auto& x : f.findings)
    if (x.fault == SliceFault::swap) {
      named = true;
      EXPECT_EQ(x.slice, "head 1");
      EXPECT_EQ(x.partner, "head 2");
      EXPECT_GT(x.score(), kThreshold);
      EXPECT_LT(x.swap_match, 0.01);
    }
  EXPECT_TRUE(named);
}

TEST(DiffSystematic, OneExpertsTokensScaledAreNamed) {
  // moe.experts [N, D] with the reference's choice [N, K]: expert 3's tokens carry its output.
  constexpr std::int64_t N = 96, D = 64, E = 8, K = 2;
  TensorSpec spec;
  spec.stage = "L01.moe.experts";
  spec.tensor = "y";
  spec.kind = OpKind::moe_experts;
  spec.axes = {{"N", N}, {"D", D}};
  auto layout = slice_layout(spec, {N, D}, 48);
  ASSERT_TRUE(layout);
  Tensor idx(DType::i64, {N, K});
  for (std::int64_t t = 0; t < N; ++t) idx.data<std::int64_t>()[t * K] = t % E, idx.data<std::int64_t>()[t * K + 1] = (t / E + 3 * t + 1) % E;
  layout->groups = idx;
  layout->n_groups = E;
  const Tensor ref = normal_tensor({N, D}, 6);
  Tensor cand = bf16_of(ref);
  for (std::int64_t t = 0; t < N; ++t)
    if (t % E == 3)
      for (std::int64_t c = 0; c < D; ++c) cand.data<double>()[t * D + c] *= 1.01;
  const SystematicFit f = fit_slices("L01.moe.experts/y", ref, cand, *layout);
  bool named = false;
  for (const auto& x : f.findings)
    if (x.family == "expert" && x.score() > kThreshold) {
      named = true;
      EXPECT_EQ(x.slice, "expert 3 (its tokens)");
      EXPECT_EQ(x.fault, SliceFault::scale);
    }
  EXPECT_TRUE(named) << (f.findings.empty() ? "" : finding_text(f, f.findings.front()));
}

TEST(DiffSystematic, TheSameNumbersForAnyThreadCount) {
  // [4096 rows, 128 features]: 8 blocks of 512 rows, summed on 1, 2 or 3 threads.
  TensorSpec spec = attention_spec();
  spec.axes = {{"B", 2}, {"S", 2048}, {"H", kH}, {"d", kD}};
  const Tensor ref = normal_tensor({2, 2048, kH, kD}, 7);
  const Tensor cand = bf16_of(ref);
  const auto layout = slice_layout(spec, ref.shape(), 2048);
  ASSERT_TRUE(layout);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    return fit_slices("k", ref, cand, *layout);
  };
  const SystematicFit one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(omp_get_num_procs());
  ASSERT_EQ(one.findings.size(), two.findings.size());
  ASSERT_EQ(one.findings.size(), three.findings.size());
  for (std::size_t i = 0; i < one.findings.size(); ++i) {
    EXPECT_EQ(one.findings[i].value, two.findings[i].value);
    EXPECT_EQ(one.findings[i].se, two.findings[i].se);
    EXPECT_EQ(one.findings[i].value, three.findings[i].value);
    EXPECT_EQ(one.findings[i].z_spread, three.findings[i].z_spread);
  }
}

TEST(DiffSystematic, ExactCopiesScoreZeroAndAConstantSliceHasNoSlope) {
  Tensor ref = normal_tensor({kB, kS, kH, kD}, 8);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t s = 0; s < kS; ++s) at(ref, b, s, 0, 0) = 0.0;  // a channel that is always 0
  const SystematicFit f = fit(ref, ref);
  EXPECT_EQ(f.score(), 0.0);
}

}  // namespace
}  // namespace tdiff
