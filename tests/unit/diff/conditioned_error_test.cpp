// The conditioned element ratio: the front the pairing keeps gives, for any local and inherited
// part, the same largest ratio as every element judged one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "diff/conditioned_error.h"

namespace tdiff {
namespace {

double brute_force(const Tensor& r, const Tensor& c, double rms, const StoredConditioning& g, double local, double inherited) {
  const std::int64_t len = r.numel() / g.row_gain.numel();
  double best = 0;
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    const double gain = g.row_gain.data<float>()[i / len];
    const double e = std::fabs(c.data<double>()[i] - r.data<double>()[i]) / (std::fabs(r.data<double>()[i]) + rms);
    best = std::max(best, e / std::sqrt(local * local + gain * gain * inherited * inherited));
  }
  return best;
}

TEST(ConditionedError, FrontGivesTheLargestRatioForAnyMixOfLocalAndInherited) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::int64_t rows = 300, len = 16;
  Tensor r(DType::f64, {rows, len}), c(DType::f64, {rows, len});
  StoredConditioning g;
  g.row_gain = Tensor(DType::f32, {rows, 1});
  double ss = 0;
  for (std::int64_t i = 0; i < rows * len; ++i) {
    r.data<double>()[i] = z(rng);
    ss += r.data<double>()[i] * r.data<double>()[i];
  }
  const double rms = std::sqrt(ss / static_cast<double>(rows * len));
  for (std::int64_t k = 0; k < rows; ++k) {
    const double gain = 1.0 + 40.0 * u(rng) * u(rng);
    g.row_gain.data<float>()[k] = static_cast<float>(gain);
    for (std::int64_t i = 0; i < len; ++i)  // errors that grow with the row's gain, and a few that do not
      c.data<double>()[k * len + i] = r.data<double>()[k * len + i] + 1e-3 * z(rng) * (k % 7 == 0 ? 3.0 : gain);
  }
  const RowConditioning front = conditioned_rows(r, c, rms, g);
  EXPECT_LT(front.front.size(), 40u) << "the front is a handful of rows, not every row";
  EXPECT_NEAR(front.max_gain, 41.0, 40.0);
  for (const auto [local, inherited] : {std::pair{1e-3, 0.0}, {1e-3, 1e-3}, {1e-5, 1e-3}, {0.0, 1e-3}, {1e-2, 1e-4}}) {
    const ConditionedWorst w = worst_conditioned(front, local, inherited);
    EXPECT_NEAR(w.ratio, brute_force(r, c, rms, g, local, inherited), 1e-12 * w.ratio) << local << " " << inherited;
    EXPECT_GE(w.row.at, 0);
  }
}

TEST(ConditionedError, GainsOfAnotherShapeAreIgnored) {
  Tensor r(DType::f64, {4, 3}), c(DType::f64, {4, 3});
  for (int i = 0; i < 12; ++i) r.data<double>()[i] = 1.0, c.data<double>()[i] = 1.0 + (i == 5 ? 0.1 : 0.0);
  StoredConditioning g;
  g.row_gain = Tensor(DType::f32, {5, 1});
  for (int i = 0; i < 5; ++i) g.row_gain.data<float>()[i] = 2.0f;
  EXPECT_TRUE(conditioned_rows(r, c, 1.0, g).front.empty());
}

}  // namespace
}  // namespace tdiff
