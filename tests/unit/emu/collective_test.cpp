// The all-reduce orders of a split (emu/collective.h) against hand-written sums: integer-exact
// inputs (every order equal), spread exponents (the orders differ where the design says),
// 2 ranks (order-independent), and the ring's element -> chunk map at the alignment edges.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "emu/collective.h"
#include "emu/numerics.h"

namespace tdiff::emu {
namespace {

using Partials = std::vector<std::vector<float>>;

ReduceSpec spec(AllReduce order, Fmt f = Fmt::bf16) { return ReduceSpec{order, f, 1, kRingChunkBytes}; }

TEST(Collective, IntegerInputsGiveTheExactSumInEveryOrder) {
  Partials x(4, std::vector<float>(32));
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 32; ++i) x[r][i] = static_cast<float>((r + 1) * (i % 5) - 3 * r);  // |sum| < 256: exact in bf16
  for (AllReduce o : {AllReduce::ring, AllReduce::tree, AllReduce::fixed, AllReduce::custom1, AllReduce::custom2}) {
    const auto y = reduce_ranks(x, spec(o));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], static_cast<float>(10 * (i % 5) - 18)) << allreduce_name(o) << " " << i;
  }
}

// Ranks 1 and 2 hold half a bf16 ulp of 1 (2^-8), rank 0 holds 1, rank 3 zero: the sum is
// 1 + 2^-7 when the two halves meet before the 1 (exact), else each half ties to even, back to 1.
Partials spread() {
  Partials x(4, std::vector<float>(32, 0.0f));
  for (int i = 0; i < 32; ++i) x[0][i] = 1.0f, x[1][i] = x[2][i] = std::ldexp(1.0f, -8);
  return x;
}

TEST(Collective, RingStartsChunkCAtRankCPlusOne) {
  // n = 32 bf16 over 4 ranks: one short loop, chunks of alignUp(8, 8) = 8 elements.
  //   chunk 0 starts at rank 1: ((2^-8 + 2^-8) + 0) + 1 = 1 + 2^-7
  //   chunk 1 starts at rank 2: ((2^-8 + 0) + 1) ties to 1, + 2^-8 ties to 1
  //   chunk 2 starts at rank 3, chunk 3 at rank 0: the 1 comes first, every half ties away: 1
  const auto y = reduce_ranks(spread(), spec(AllReduce::ring));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], i < 8 ? 1.0078125f : 1.0f) << i;
}

TEST(Collective, TreeIsTheChainFromTheLastRank) {
  // s = x3; s = x2 + s; s = x1 + s; s = x0 + s: the halves meet first, every element 1 + 2^-7.
  for (float v : reduce_ranks(spread(), spec(AllReduce::tree))) EXPECT_EQ(v, 1.0078125f);
  // fixed (rank order) meets the 1 first: 1.
  for (float v : reduce_ranks(spread(), spec(AllReduce::fixed))) EXPECT_EQ(v, 1.0f);
  // custom1: float32 in rank order, rounded once: exact 1 + 2^-7.
  for (float v : reduce_ranks(spread(), spec(AllReduce::custom1))) EXPECT_EQ(v, 1.0078125f);
  // In float32 every order is exact here.
  for (float v : reduce_ranks(spread(), spec(AllReduce::fixed, Fmt::f32))) EXPECT_EQ(v, 1.0078125f);
}

TEST(Collective, TwoRanksAreOrderIndependent) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-8, 8);
  Partials x(2, std::vector<float>(1000));
  for (auto& r : x)
    for (auto& v : r) v = arith::round_bf16(std::ldexp(m(rng), ex(rng)) * (rng() % 2 ? 1.0f : -1.0f));
  const auto ring = reduce_ranks(x, spec(AllReduce::ring));
  EXPECT_EQ(ring, reduce_ranks(x, spec(AllReduce::tree)));
  EXPECT_EQ(ring, reduce_ranks(x, spec(AllReduce::fixed)));
  // Four ranks of the same spread: ring and tree differ somewhere.
  x.resize(4, x[0]);
  for (auto& v : x[2]) v = arith::round_bf16(std::ldexp(m(rng), ex(rng)));
  for (auto& v : x[3]) v = arith::round_bf16(-std::ldexp(m(rng), ex(rng)));
  EXPECT_NE(reduce_ranks(x, spec(AllReduce::ring)), reduce_ranks(x, spec(AllReduce::tree)));
}

TEST(Collective, RingChunksFollowTheMessageSizeAndChannels) {
  const ReduceSpec s = spec(AllReduce::ring);
  // n = 8N - 1, 8N, 8N + 1 at N = 4: chunks of 8, 8, 16 (alignUp(ceil(n/4), 8)); the last empty at 33.
  EXPECT_EQ(ring_place(30, 31, 4, s).chunk, 3);
  EXPECT_EQ(ring_place(8, 32, 4, s).chunk, 1);
  EXPECT_EQ(ring_place(8, 33, 4, s).chunk, 0);
  EXPECT_EQ(ring_place(32, 33, 4, s).chunk, 2);
  // The same element at another message size starts elsewhere (ROCm/rocm-systems#11661's effect).
  EXPECT_EQ(ring_place(8, 64, 4, s).chunk, 0);
  // Whole loops of 4 chunks of 1 Mi bf16 elements (2 MiB), then a short loop of 1 Mi: chunks of 256 Ki.
  const std::int64_t Mi = 1 << 20;
  EXPECT_EQ(ring_place(Mi, 5 * Mi, 4, s).chunk, 1);
  EXPECT_EQ(ring_place(4 * Mi + 256 * 1024, 5 * Mi, 4, s).chunk, 1);
  // Two channels of 32 elements each: element 40 is channel 1's ninth, chunk 1 of 8.
  ReduceSpec two = s;
  two.channels = 2;
  EXPECT_EQ(ring_place(40, 64, 4, two).channel, 1);
  EXPECT_EQ(ring_place(40, 64, 4, two).chunk, 1);
}

TEST(Collective, Custom2RanksOwnPacksAndTheLastTheRest) {
  // 36 bf16 elements = 5 packs of 8 (the last short); 4 ranks own 1 pack each, rank 3 also the 5th.
  Partials x(4, std::vector<float>(36, 0.0f));
  for (int i = 0; i < 36; ++i) x[0][i] = 1.0f, x[1][i] = x[2][i] = std::ldexp(1.0f, -8), x[3][i] = -1.0f;
  // float32 sums are exact in every order here (2^-7), so only the rounding once matters.
  for (float v : reduce_ranks(x, spec(AllReduce::custom2))) EXPECT_EQ(v, std::ldexp(1.0f, -7));
  // A ring on the same data: chunks starting at rank 3 (-1) or rank 0 (1) cancel the big terms first.
  const auto ring = reduce_ranks(x, spec(AllReduce::ring));
  EXPECT_EQ(ring[0], std::ldexp(1.0f, -7));  // chunk 0 starts at rank 1: 2^-8 + 2^-8 - 1 + 1
}

}  // namespace
}  // namespace tdiff::emu
