// The split settings of a policy (numerics/policy.h Split): parsing, the one-line errors, the
// description a saved run replays, and the model's constraints.
#include <gtest/gtest.h>

#include "base/error.h"
#include "numerics/policy.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

TEST(Split, UnsplitByDefaultAndDescribedOnlyWhenSplit) {
  Policy p = Policy::preset("fixed");
  EXPECT_FALSE(p.split().active());
  p.add_set("allreduce=tree");  // an order without a split changes nothing
  EXPECT_EQ(p.describe(), "fixed");
  p.add_set("tp=4");
  EXPECT_EQ(p.describe(), "fixed + tp=4 + ep=1 + allreduce=tree + moe_reduce=sum_then_reduce + channels=1");
}

TEST(Split, BadSizesAreInputErrors) {
  Policy p = Policy::preset("fixed");
  for (const char* bad : {"tp=3", "tp=0", "tp=16", "tp=x", "ep=0", "channels=0", "allreduce=random", "moe_reduce=x"})
    EXPECT_THROW(p.add_set(bad), InputError) << bad;
  EXPECT_THROW(p.add_set("L00*:tp=2"), InputError);  // run-wide, no stage pattern
}

TEST(Split, TheModelMustDivide) {
  const ModelConfig tiny = synth_preset("tiny");  // 4 heads, 2 output groups, 8 experts
  Split s;
  s.tp = 2;
  EXPECT_NO_THROW(check_split(s, tiny));
  s.tp = 4;
  EXPECT_THROW(check_split(s, tiny), InputError);
  s.tp = 1, s.ep = 3;
  EXPECT_THROW(check_split(s, tiny), InputError);
  s.ep = 4;
  EXPECT_NO_THROW(check_split(s, tiny));
  const ModelConfig v4 = synth_preset("v4-flash-dims");
  for (int tp : {2, 4, 8}) {
    s = Split{};
    s.tp = tp;
    EXPECT_NO_THROW(check_split(s, v4)) << tp;
  }
}

}  // namespace
}  // namespace tdiff
