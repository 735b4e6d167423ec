// Phase times (base/timing.h): phases summed in the order first used, the rest printed.
#include <gtest/gtest.h>

#include <string>

#include "base/timing.h"

namespace tdiff {
namespace {

TEST(PhaseTimes, SumsPhasesInFirstUseOrderAndPrintsTheRest) {
  PhaseTimes t;
  t.add("candidate", 1.5);
  t.add("compare", 0.25);
  t.add("candidate", 0.5);
  t.add("tiny", 0.001);
  PhaseTimes floor;
  floor.add("candidate", 0.75);
  t.add(floor, "floor ");
  EXPECT_DOUBLE_EQ(t.get("candidate"), 2.0);
  EXPECT_DOUBLE_EQ(t.get("floor candidate"), 0.75);
  EXPECT_DOUBLE_EQ(t.get("never"), 0.0);
  ASSERT_EQ(t.phases().size(), 4u);
  EXPECT_EQ(t.phases()[0].first, "candidate");
  EXPECT_EQ(t.phases()[3].first, "floor candidate");
  // Phases under 5 ms are left out; what no phase covers is "other".
  EXPECT_EQ(t.line(4.0), "4.00 s: candidate 2.00, compare 0.25, floor candidate 0.75, other 1.00");
  EXPECT_EQ(t.line(3.0), "3.00 s: candidate 2.00, compare 0.25, floor candidate 0.75");
  t.stop_clock();
  const std::string frozen = t.line();
  EXPECT_EQ(t.line(), frozen);  // a stopped clock prints the same line later
}

}  // namespace
}  // namespace tdiff
