// bit_diff (checks/determinism.h): two tensors compared byte for byte, not by value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "checks/determinism.h"

namespace tdiff {
namespace {

TEST(BitDiff, ComparesBytesNotValues) {
  Tensor a(DType::f64, {2, 3}), b(DType::f64, {2, 3});
  EXPECT_TRUE(bit_diff(a, b).identical());
  b.data<double>()[4] = 0.25;
  BitDiff d = bit_diff(a, b);
  EXPECT_EQ(d.differing, 1);
  EXPECT_EQ(d.numel, 6);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.25);
  b.data<double>()[4] = -0.0;  // equal as a value, not as bits
  d = bit_diff(a, b);
  EXPECT_EQ(d.differing, 1);
  EXPECT_EQ(d.max_abs, 0.0);
  a.data<double>()[4] = b.data<double>()[4] = std::numeric_limits<double>::quiet_NaN();  // same bits
  EXPECT_TRUE(bit_diff(a, b).identical());
  a.data<double>()[0] = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(std::isinf(bit_diff(a, b).max_abs));
  EXPECT_EQ(bit_diff(a, Tensor(DType::f64, {3, 2})).differing, 6);  // another shape: everything differs
}
}  // namespace
}  // namespace tdiff
