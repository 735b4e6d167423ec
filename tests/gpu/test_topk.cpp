// covers: moe_select
// hip::topk_rows against emu::topk exactly (the router's expert choice with its bias, and a
// plain top-k over more values than one LDS tile), both tie rules, three comparison formats,
// and against refcpu::topk_indices where the rules coincide.
#include "emu/topk.h"
#include "gpu_test.h"
#include "hip/topk.h"
#include "refcpu/indexer.h"

namespace tdiff::gputest {
namespace {

// Tie-heavy values: multiples of 1/16, nudged by a few float32 ulps that bf16/fp16 erase.
std::vector<float> tie_values(std::mt19937_64& rng, std::size_t count) {
  std::uniform_int_distribution<int> q(-40, 40), nudge(0, 3);
  std::vector<float> v(count);
  for (auto& x : v) x = q(rng) / 16.0f * (1.0f + static_cast<float>(nudge(rng)) * 0x1p-20f);
  return v;
}

void check_rows(std::int64_t rows, std::int64_t n, std::int64_t k, bool with_bias) {
  auto rng = test_rng();
  const auto values = tie_values(rng, rows * n);
  const auto bias = with_bias ? random_values(rng, n, -0.25f, 0.25f, arith::Fmt::f32) : std::vector<float>{};
  Dev<float> d_values(values), d_bias(bias);
  for (const auto cmp : {arith::Fmt::f32, arith::Fmt::bf16, arith::Fmt::f16})
    for (const auto ties : {TieBreak::index, TieBreak::unstable}) {
      const hip::TopkSpec spec{cmp, ties, 0x5eedull};
      Dev<std::int64_t> d_out(rows * k);
      hip::topk_rows(d_values.ptr(), rows, n, k, with_bias ? d_bias.ptr() : nullptr, spec, d_out.ptr(), test_stream());
      const auto got = d_out.get();
      std::size_t mismatched = 0;
      std::vector<float> row(n);
      std::vector<std::int64_t> want(k);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t j = 0; j < n; ++j)  // moe_select: biased = add_fmt(score, bias, cmp)
          row[j] = with_bias ? arith::add_fmt(values[r * n + j], bias[j], cmp) : values[r * n + j];
        emu::topk(row.data(), n, k, cmp, ties, spec.seed ^ static_cast<std::uint64_t>(r), want.data());
        mismatched += !std::equal(want.begin(), want.end(), got.begin() + r * k);
      }
      EXPECT_EQ(mismatched, 0u) << "cmp " << int(cmp) << " ties " << int(ties);
      if (cmp == arith::Fmt::f32 && ties == TieBreak::index && !with_bias)
        for (std::int64_t r = 0; r < rows; ++r) {
          std::vector<double> rd(values.begin() + r * n, values.begin() + (r + 1) * n);
          refcpu::topk_indices(rd.data(), n, k, TieRule::lowest_index, want.data());
          EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + r * k)) << "row " << r;
        }
    }
}

TEST(HipTopk, RouterExpertChoiceWithBias) { check_rows(37, 256, 8, true); }
TEST(HipTopk, MoreValuesThanOneTile) { check_rows(5, 3001, 517, false); }
TEST(HipTopk, KEqualsN) { check_rows(3, 70, 70, false); }

TEST(HipTopk, UnstableTiesFollowTheSeed) {
  auto rng = test_rng();
  const std::int64_t rows = 16, n = 64, k = 4;
  const auto values = tie_values(rng, rows * n);
  Dev<float> d_values(values);
  auto run = [&](const hip::TopkSpec& spec) {
    Dev<std::int64_t> d_out(rows * k);
    hip::topk_rows(d_values.ptr(), rows, n, k, nullptr, spec, d_out.ptr(), test_stream());
    return d_out.get();
  };
  const hip::TopkSpec a{arith::Fmt::bf16, TieBreak::unstable, 1}, b{arith::Fmt::bf16, TieBreak::unstable, 2};
  EXPECT_EQ(run(a), run(a));  // same seed, same order
  EXPECT_NE(run(a), run(b));
  const hip::TopkSpec ix{arith::Fmt::bf16, TieBreak::index, 1}, iy{arith::Fmt::bf16, TieBreak::index, 2};
  EXPECT_EQ(run(ix), run(iy));  // the index rule ignores the seed
}

// The router at v4-flash dimensions: 1024 tokens, 256 experts, 6 picks, with the bias.
TEST(HipTopk, RouterFlashDimsMatchEmu) {
  auto rng = test_rng();
  const std::int64_t rows = 1024, n = 256, k = 6;
  const auto values = random_values(rng, rows * n, 0.0f, 3.0f, arith::Fmt::f32);
  const auto bias = random_values(rng, n, -0.1f, 0.1f, arith::Fmt::f32);
  Dev<float> d_values(values), d_bias(bias);
  Dev<std::int64_t> d_out(rows * k);
  const hip::TopkSpec spec{arith::Fmt::f32, TieBreak::index, 0};
  const double ms =
      time_ms([&] { hip::topk_rows(d_values.ptr(), rows, n, k, d_bias.ptr(), spec, d_out.ptr(), test_stream()); });
  const auto got = d_out.get();
  std::printf("topk rows=1024 n=256 k=6 (router): %.3f ms\n", ms);
  std::size_t mismatched = 0;
  std::vector<float> row(n);
  std::vector<std::int64_t> want(k);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) row[j] = arith::add_fmt(values[r * n + j], bias[j], spec.cmp);
    emu::topk(row.data(), n, k, spec.cmp, spec.ties, spec.seed ^ static_cast<std::uint64_t>(r), want.data());
    mismatched += !std::equal(want.begin(), want.end(), got.begin() + r * k);
  }
  EXPECT_EQ(mismatched, 0u);
}

}  // namespace
}  // namespace tdiff::gputest
