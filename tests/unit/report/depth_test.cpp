// Error over depth: one row per layer's output streams, in layer order, with the growth from
// the layer before and their geometric mean; nothing for a model of one layer.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "report/depth.h"

namespace tdiff::report {
namespace {

TensorDiff row(const std::string& stage, double rel_l2, double expected) {
  TensorDiff d;
  d.stage = stage;
  d.tensor.assign(1, 'X');  // (a literal assigned here trips GCC 12's -Wrestrict false positive)
  d.metrics.rel_l2 = rel_l2;
  if (expected > 0) {
    ExpectedError e;
    e.rel = expected;
    d.expected = e;
  }
  return d;
}

TensorDiff stream(int layer, double rel_l2, double expected) {
  return row(fmt::format("L{:02}.hc_ffn.post", layer), rel_l2, expected);
}

TEST(Depth, OneRowPerLayerWithItsGrowth) {
  CompareResult r;
  r.rows = {stream(1, 0.02, 0.01), stream(0, 0.01, 0.01), stream(2, 0.08, -1)};
  r.rows.push_back(row("L01.attn.core", 5, -1));  // not a layer's output
  r.rows.push_back(row("Lxx.hc_ffn.post", 5, -1));  // a key of another file that only looks like one
  const auto rows = error_over_depth(r);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].layer, 0);
  EXPECT_EQ(rows[0].row, 1u);
  EXPECT_LT(rows[0].growth, 0);
  EXPECT_DOUBLE_EQ(rows[1].growth, 2.0);
  EXPECT_DOUBLE_EQ(rows[2].growth, 4.0);
  EXPECT_LT(rows[2].expected, 0);
  EXPECT_NEAR(mean_growth(rows), std::sqrt(8.0), 1e-12);
  const std::string html = depth_html(r);
  EXPECT_NE(html.find("Error over depth"), std::string::npos);
  EXPECT_NE(html.find("mean growth per layer 2.828x"), std::string::npos) << html;
  EXPECT_NE(html.find("href=\"#row-1\">L00"), std::string::npos);
}

TEST(Depth, NothingForOneLayer) {
  CompareResult r;
  r.rows = {stream(0, 0.01, 0.01)};
  EXPECT_TRUE(error_over_depth(r).empty());
  EXPECT_EQ(depth_html(r), "");
}

}  // namespace
}  // namespace tdiff::report
