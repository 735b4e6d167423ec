// The roundings a split adds to the expected error (diff/expected_split.h).
#include <gtest/gtest.h>

#include "diff/expected_split.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

const Stage& stage(const std::vector<Stage>& stages, const std::string& name) {
  for (const auto& s : stages)
    if (s.name == name) return s;
  throw std::runtime_error(name);
}

TEST(ExpectedSplit, RowParallelStagesOnlyAndTheHopsOfTheOrder) {
  const ModelConfig c = synth_preset("v4-flash-dims");
  const auto stages = build_stages(c);
  Split s;
  EXPECT_EQ(split_rounding(stage(stages, "L03.attn.o_b"), s, c).ranks, 1);  // unsplit
  s.tp = 4;
  const SplitRounding o_b = split_rounding(stage(stages, "L03.attn.o_b"), s, c);
  EXPECT_EQ(o_b.ranks, 4);
  EXPECT_EQ(o_b.split_k, 8 * 1024);
  EXPECT_DOUBLE_EQ(o_b.hops, 2.25);  // (N+1)/2 - 1/N
  EXPECT_FALSE(o_b.output_rounded);
  EXPECT_EQ(o_b.note, "tp=4 ring: 4 partials + 3 hops");
  EXPECT_EQ(split_rounding(stage(stages, "L03.attn.q_b"), s, c).ranks, 1);  // column-parallel: whole sums
  // sum_then_reduce: the branches are exact sums of their partials, moe.out reduces.
  EXPECT_DOUBLE_EQ(split_rounding(stage(stages, "L03.moe.experts"), s, c).hops, 0.0);
  EXPECT_DOUBLE_EQ(split_rounding(stage(stages, "L03.moe.out"), s, c).hops, 2.25);
  s.tp = 8;
  EXPECT_DOUBLE_EQ(split_rounding(stage(stages, "L03.attn.o_b"), s, c).hops, 4.375);
  s.allreduce = AllReduce::custom1;  // float32, rounded once: the output's rounding
  EXPECT_TRUE(split_rounding(stage(stages, "L03.attn.o_b"), s, c).output_rounded);
  s.ep = 8;  // experts whole: no MoE split
  EXPECT_EQ(split_rounding(stage(stages, "L03.moe.out"), s, c).ranks, 1);
}

}  // namespace
}  // namespace tdiff
