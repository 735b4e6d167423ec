// The simulated split's kernels (hip/collective.h) and the expert-parallel combine order:
// reduce_ranks against emu::reduce_ranks bit for bit, for every order, 2 to 8 ranks, one and
// three channels, sizes at the ring's chunk boundaries and beyond one loop of chunks, on
// partials whose exponents spread over 16 binades (so that the orders disagree); the column
// slice exact; the combine in owning-rank order against the order written out on the host.
#include <cmath>

#include "gpu_test.h"
#include "hip/collective.h"
#include "hip/moe.h"

namespace tdiff::gputest {
namespace {

// n bf16 values per rank, magnitudes 2^-8 .. 2^8 with random signs.
std::vector<std::vector<float>> spread_partials(std::mt19937_64& rng, int ranks, std::int64_t n) {
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  std::vector<std::vector<float>> x(static_cast<std::size_t>(ranks), std::vector<float>(static_cast<std::size_t>(n)));
  for (auto& r : x)
    for (auto& v : r) v = arith::round_fmt((rng() & 1 ? -1.0f : 1.0f) * std::exp2(exponent(rng)), Fmt::bf16);
  return x;
}

TEST(Collective, ReduceRanksEqualsEmu) {
  auto rng = test_rng();
  std::int64_t checked = 0, disagree_with_fixed = 0;
  for (int ranks : {2, 3, 4, 8})
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{8} * ranks - 1, std::int64_t{8} * ranks,
                           std::int64_t{8} * ranks + 1, std::int64_t{1000}, (std::int64_t{1} << 20) + 3})
      for (int channels : {1, 3})
        for (AllReduce order : {AllReduce::ring, AllReduce::tree, AllReduce::fixed, AllReduce::custom1, AllReduce::custom2}) {
          emu::ReduceSpec spec{order, Fmt::bf16, channels};
          if (n > 4096) spec.chunk_bytes = 1 << 12;  // many loops of small chunks, a short last one
          const auto x = spread_partials(rng, ranks, n);
          std::vector<float> flat;
          for (const auto& r : x) flat.insert(flat.end(), r.begin(), r.end());
          Dev<float> d_x(flat), d_y(n);
          hip::reduce_ranks(d_x.ptr(), ranks, n, spec, d_y.ptr(), test_stream());
          const auto y = d_y.get();
          const auto want = emu::reduce_ranks(x, spec);
          std::int64_t differ = 0;
          for (std::int64_t i = 0; i < n; ++i)
            differ += arith::float_bits(y[static_cast<std::size_t>(i)]) != arith::float_bits(want[static_cast<std::size_t>(i)]);
          ASSERT_EQ(differ, 0) << "order " << static_cast<int>(order) << ", " << ranks << " ranks, n = " << n << ", "
                               << channels << " channels";
          if (ranks >= 4 && order == AllReduce::ring) {
            const auto fixed = emu::reduce_ranks(x, emu::ReduceSpec{AllReduce::fixed, Fmt::bf16, channels});
            for (std::int64_t i = 0; i < n; ++i) disagree_with_fixed += want[static_cast<std::size_t>(i)] != fixed[static_cast<std::size_t>(i)];
          }
          checked += n;
        }
  std::printf("reduce_ranks: %lld elements equal emu's; ring and fixed disagree on %lld of the 4+-rank ones\n",
              static_cast<long long>(checked), static_cast<long long>(disagree_with_fixed));
  EXPECT_GT(disagree_with_fixed, 0) << "the inputs cannot tell the orders apart";
}

TEST(Collective, SliceColumnsCopiesTheRankRange) {
  const std::int64_t rows = 37, cols = 96, c0 = 48, width = 24;
  auto rng = test_rng();
  const auto w = random_magnitudes(rng, rows * cols);
  Dev<float> d_w(w), d_s(rows * width);
  hip::slice_columns(d_w.ptr(), rows, cols, c0, width, d_s.ptr(), test_stream());
  const auto s = d_s.get();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < width; ++j)
      ASSERT_EQ(s[static_cast<std::size_t>(r * width + j)], w[static_cast<std::size_t>(r * cols + c0 + j)]) << r << "," << j;
}

// Expert parallel: each token's contributions summed by owning rank (experts [q E/ep, (q+1) E/ep)
// on rank q), k order within a rank, in float32, rounded once.
TEST(Collective, ExpertParallelCombineAddsByOwningRank) {
  const std::int64_t N = 53, K = 6, D = 40, E = 16, per_rank = 4;
  auto rng = test_rng();
  const auto slot = random_magnitudes(rng, N * K * D, 1e-3f, 64.0f, Fmt::bf16);
  const auto wt = random_magnitudes(rng, N * K, 0.01f, 1.0f);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(N * K));
  for (auto& e : idx) e = static_cast<std::int64_t>(rng() % E);
  Dev<float> d_slot(slot), d_wt(wt), d_out(N * D), d_plain(N * D);
  Dev<std::int64_t> d_idx(idx);
  hip::combine(d_slot.ptr(), d_wt.ptr(), N, K, D, false, Fmt::bf16, d_out.ptr(), test_stream(), d_idx.ptr(), per_rank);
  hip::combine(d_slot.ptr(), d_wt.ptr(), N, K, D, false, Fmt::bf16, d_plain.ptr(), test_stream());
  const auto out = d_out.get(), plain = d_plain.get();
  std::int64_t reordered = 0;
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t ch = 0; ch < D; ++ch) {
      float acc = 0;
      for (std::int64_t q = 0; q < E / per_rank; ++q)
        for (std::int64_t k = 0; k < K; ++k) {
          const auto s = static_cast<std::size_t>(t * K + k);
          if (idx[s] / per_rank == q) acc = arith::add_rn(acc, arith::mul_rn(wt[s], slot[s * D + static_cast<std::size_t>(ch)]));
        }
      const auto i = static_cast<std::size_t>(t * D + ch);
      ASSERT_EQ(arith::float_bits(out[i]), arith::float_bits(arith::round_fmt(acc, Fmt::bf16))) << t << "," << ch;
      reordered += out[i] != plain[i];
    }
  std::printf("owning-rank order: %lld of %lld outputs differ from k order\n", static_cast<long long>(reordered),
              static_cast<long long>(N * D));
  EXPECT_GT(reordered, 0);
}

}  // namespace
}  // namespace tdiff::gputest
