// Metrics against values computed here the plain way, edge cases, and thread-count
// independence of tensor_metrics / logits_metrics / routing_metrics.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>

#include <gtest/gtest.h>

#include "base/error.h"
#include "diff/metric_fields.h"
#include "diff/metrics.h"
#include "diff/thresholds.h"
#include "field_count.h"

namespace tdiff {
namespace {

// Seed from the test's name (FNV-1a), so every test has its own reproducible data.
std::uint64_t name_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::uint64_t h = 1469598103934665603ull;
  for (std::string_view s : {std::string_view(info->test_suite_name()), std::string_view(info->name())})
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// Normal values, never all zero; the candidate is the reference plus noise of `scale`.
std::pair<Tensor, Tensor> random_pair(Shape shape, double scale, DType cand_dtype = DType::f64) {
  std::mt19937_64 rng(name_seed());
  std::normal_distribution<double> nd;
  Tensor r(DType::f64, shape), c(DType::f64, shape);
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    r.data<double>()[i] = nd(rng);
    c.data<double>()[i] = r.data<double>()[i] + scale * nd(rng);
  }
  return {r, cand_dtype == DType::f64 ? c : c.to(cand_dtype)};
}

struct Plain {
  double cosine, max_abs, rmse, rel_l2, max_rel, ref_rms, max_abs_ref, max_abs_scaled;
  std::int64_t argmax, argmax_scaled;
};
Plain plain_metrics(const Tensor& r, const Tensor& c, double floor) {
  double rr = 0, cc = 0, rc = 0, dd = 0;
  Plain p{0, 0, 0, 0, 0, 0, 0, 0, -1, -1};
  const double n = static_cast<double>(r.numel());
  for (std::int64_t i = 0; i < r.numel(); ++i) rr += r.value(i) * r.value(i);
  const double s = std::max(1.0, std::sqrt(rr / n));  // the scale floor of max_abs_scaled
  rr = 0;
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    const double a = r.value(i), b = c.value(i), d = b - a;
    rr += a * a, cc += b * b, rc += a * b, dd += d * d;
    if (std::fabs(d) > p.max_abs) p.max_abs = std::fabs(d), p.argmax = i;
    const double scaled = std::fabs(d) / std::max(s, std::fabs(a));
    if (scaled > p.max_abs_scaled) p.max_abs_scaled = scaled, p.argmax_scaled = i;
    p.max_rel = std::max(p.max_rel, std::fabs(d) / std::max(std::fabs(a), floor));
    p.max_abs_ref = std::max(p.max_abs_ref, std::fabs(a));
  }
  p.cosine = rc / std::sqrt(rr) / std::sqrt(cc);
  p.rmse = std::sqrt(dd / n);
  p.rel_l2 = std::sqrt(dd) / std::sqrt(rr);
  p.ref_rms = std::sqrt(rr / n);
  return p;
}

void expect_matches_plain(const Tensor& r, const Tensor& c) {
  const TensorMetrics m = tensor_metrics(r, c);
  const Plain p = plain_metrics(r, c, MetricOptions{}.rel_floor);
  EXPECT_EQ(m.count, r.numel());
  EXPECT_EQ(m.compared, r.numel());
  EXPECT_NEAR(m.cosine, p.cosine, 1e-13);
  EXPECT_DOUBLE_EQ(m.max_abs, p.max_abs);  // a maximum is exact, whatever the order
  EXPECT_EQ(m.argmax_abs, p.argmax);
  // Divided by rms(r) where that exceeds 1, whose sum runs in another order here.
  EXPECT_NEAR(m.max_abs_scaled, p.max_abs_scaled, 1e-12 * p.max_abs_scaled);
  EXPECT_EQ(m.argmax_abs_scaled, p.argmax_scaled);
  if (p.argmax_scaled >= 0) EXPECT_EQ(m.ref_at_max_abs_scaled, std::fabs(r.value(p.argmax_scaled)));
  EXPECT_NEAR(m.rmse, p.rmse, 1e-12 * p.rmse);
  EXPECT_NEAR(m.rel_l2, p.rel_l2, 1e-12 * p.rel_l2);
  EXPECT_DOUBLE_EQ(m.max_rel, p.max_rel);
  EXPECT_NEAR(m.ref_rms, p.ref_rms, 1e-12 * p.ref_rms);
  EXPECT_DOUBLE_EQ(m.max_abs_ref, p.max_abs_ref);
  EXPECT_EQ(m.new_nonfinite, 0);
}

TEST(DiffMetrics, MatchesPlainComputationSmallAwkwardShape) {
  auto [r, c] = random_pair({3, 7, 13}, 1e-3);  // 273 elements: not a multiple of the lanes
  expect_matches_plain(r, c);
}

// Times a power of two (exact): the same data at rms(r) ~ 1 and ~ 5, so max_abs_scaled
// once from the first pass and once from the second.
void scale_both(Tensor& r, Tensor& c, double k) {
  for (std::int64_t i = 0; i < r.numel(); ++i) r.data<double>()[i] *= k, c.data<double>()[i] *= k;
}

TEST(DiffMetrics, MatchesPlainComputationAcrossChunks) {
  auto [r, c] = random_pair({2, 65599}, 1e-2);  // several 65536-element chunks plus a tail
  expect_matches_plain(r, c);
  scale_both(r, c, 4.0);
  ASSERT_GT(tensor_metrics(r, c).max_abs_scale, 3.0);
  expect_matches_plain(r, c);
}

TEST(DiffMetrics, MixedDtypes) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    auto [r, c] = random_pair({1000}, 1e-3, t);
    expect_matches_plain(r, c);
    auto [r2, c2] = random_pair({1000}, 1e-3);
    expect_matches_plain(r2.to(t), c2);  // low-precision reference, float64 candidate
  }
}

TEST(DiffMetrics, HandComputedTinyExample) {
  // r = (3, 4), c = (4, 3): cosine 24/25, diff (1, -1): max_abs 1, rmse 1, rel_l2 sqrt(2)/5.
  Tensor r(DType::f64, {2}), c(DType::f64, {2});
  r.data<double>()[0] = 3, r.data<double>()[1] = 4;
  c.data<double>()[0] = 4, c.data<double>()[1] = 3;
  const TensorMetrics m = tensor_metrics(r, c);
  EXPECT_DOUBLE_EQ(m.cosine, 24.0 / 25.0);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.argmax_abs, 0);
  EXPECT_DOUBLE_EQ(m.rmse, 1.0);
  EXPECT_DOUBLE_EQ(m.rel_l2, std::sqrt(2.0) / 5.0);
  EXPECT_DOUBLE_EQ(m.max_rel, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.ref_rms, std::sqrt(12.5));
  EXPECT_EQ(m.n_diff, 2);
}

// err_rel = max |d_i| / (|r_i| + rms(r)), its first element and both values there; an
// all-zero reference with a difference is infinitely far, with none no error.
TEST(DiffMetrics, ErrRelHandComputed) {
  // r = (3, 4), rms sqrt(12.5) = 3.536; d = (1, -1): 1 / (3 + 3.536) beats 1 / (4 + 3.536).
  Tensor r(DType::f64, {2}), c(DType::f64, {2});
  r.data<double>()[0] = 3, r.data<double>()[1] = 4;
  c.data<double>()[0] = 4, c.data<double>()[1] = 3;
  const TensorMetrics m = tensor_metrics(r, c);
  EXPECT_DOUBLE_EQ(m.err_rel, 1.0 / (3.0 + std::sqrt(12.5)));
  EXPECT_EQ(m.argmax_err_rel, 0);
  EXPECT_EQ(m.ref_at_err, 3.0);
  EXPECT_EQ(m.cand_at_err, 4.0);
  Tensor z(DType::f64, {3}), zc(DType::f64, {3});
  for (int i = 0; i < 3; ++i) z.data<double>()[i] = zc.data<double>()[i] = 0;
  EXPECT_EQ(tensor_metrics(z, zc).err_rel, 0.0);
  zc.data<double>()[2] = 1e-9;
  const TensorMetrics far = tensor_metrics(z, zc);
  EXPECT_TRUE(std::isinf(far.err_rel));
  EXPECT_EQ(far.argmax_err_rel, 2);
}

// On a tensor of order 1 (rms(r) <= 1): below |r| = 1 the absolute error, above it the
// relative one. On a larger tensor, relative to rms(r) where |r| is below it. Values exact in
// binary.
TEST(DiffMetrics, MaxAbsScaledHandComputed) {
  Tensor r(DType::f64, {8}), c(DType::f64, {8});
  const double rv[] = {0.5, -2, 0.25, 0, 0, 0, 0, 0};  // rms sqrt(4.3125 / 8) = 0.73
  const double cv[] = {0.75, -2.5, 0.25, 0, 0, 0, 0, 0.125};
  std::memcpy(r.raw(), rv, sizeof rv);
  std::memcpy(c.raw(), cv, sizeof cv);
  // |d| = 0.25, 0.5, 0, 0, 0, 0, 0, 0.125; scaled: 0.25 / 1, 0.5 / 2, 0, ..., 0.125 / 1.
  TensorMetrics m = tensor_metrics(r, c);
  EXPECT_EQ(m.max_abs, 0.5);
  EXPECT_EQ(m.argmax_abs, 1);
  EXPECT_EQ(m.max_abs_scale, 1.0);
  EXPECT_EQ(m.max_abs_scaled, 0.25);
  EXPECT_EQ(m.argmax_abs_scaled, 0);  // the first of the two elements reaching 0.25
  EXPECT_EQ(m.ref_at_max_abs_scaled, 0.5);
  c.data<double>()[0] = 0.625;  // now 0.125: the relative error at |r| = 2 is the largest
  m = tensor_metrics(r, c);
  EXPECT_EQ(m.max_abs_scaled, 0.25);
  EXPECT_EQ(m.argmax_abs_scaled, 1);
  EXPECT_EQ(m.ref_at_max_abs_scaled, 2.0);

  // rms(r) = sqrt(36 / 4) = 3: an error of 0.75 where r = 0 counts as 0.75 / 3, one of 1.5 at
  // |r| = 6 as 1.5 / 6.
  Tensor r2(DType::f64, {4}), c2(DType::f64, {4});
  const double rv2[] = {6, 0, 0, 0}, cv2[] = {7.5, 0.75, 0, 0};
  std::memcpy(r2.raw(), rv2, sizeof rv2);
  std::memcpy(c2.raw(), cv2, sizeof cv2);
  m = tensor_metrics(r2, c2);
  EXPECT_EQ(m.ref_rms, 3.0);
  EXPECT_EQ(m.max_abs_scale, 3.0);
  EXPECT_EQ(m.max_abs, 1.5);
  EXPECT_EQ(m.max_abs_scaled, 0.25);
  EXPECT_EQ(m.argmax_abs_scaled, 0);  // 1.5 / 6 and 0.75 / 3 tie: the first
  EXPECT_EQ(m.ref_at_max_abs_scaled, 6.0);
  c2.data<double>()[0] = 6.75;  // 0.125 at |r| = 6: the near-zero element, against rms(r)
  m = tensor_metrics(r2, c2);
  EXPECT_EQ(m.max_abs_scaled, 0.25);
  EXPECT_EQ(m.argmax_abs_scaled, 1);
  EXPECT_EQ(m.ref_at_max_abs_scaled, 0.0);
}

TEST(DiffMetrics, ZeroVectors) {
  Tensor z(DType::f32, {5}), z2(DType::f32, {5});
  auto [r, c] = random_pair({5}, 0.1, DType::f32);
  const TensorMetrics both = tensor_metrics(z, z2);
  EXPECT_EQ(both.cosine, 1.0);
  EXPECT_EQ(both.rel_l2, 0.0);
  EXPECT_EQ(both.n_diff, 0);
  EXPECT_EQ(tensor_metrics(z, c).cosine, 0.0);
  EXPECT_TRUE(std::isinf(tensor_metrics(z, c).rel_l2));
  EXPECT_EQ(tensor_metrics(r, z).cosine, 0.0);
  EXPECT_EQ(tensor_metrics(r, z).rel_l2, 1.0);
  EXPECT_EQ(tensor_metrics(Tensor(DType::f32, {0}), Tensor(DType::f32, {0})).cosine, 1.0);
}

TEST(DiffMetrics, IdenticalTensorsAreExact) {
  auto [r, c] = random_pair({777}, 0.0, DType::f32);
  const TensorMetrics m = tensor_metrics(r, r.clone());
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.n_diff, 0);
  EXPECT_NEAR(m.cosine, 1.0, 1e-15);
}

TEST(DiffMetrics, RelFloorKeepsTinyReferenceValuesFromDominating) {
  Tensor r(DType::f64, {2}), c(DType::f64, {2});
  r.data<double>()[0] = 1e-9, c.data<double>()[0] = 1e-9 + 1e-4;  // tiny value, absolute error 1e-4
  r.data<double>()[1] = 1.0, c.data<double>()[1] = 1.0;
  EXPECT_NEAR(tensor_metrics(r, c).max_rel, 1e-4 / 1e-3, 1e-9);
  EXPECT_NEAR(tensor_metrics(r, c, {.rel_floor = 1e-6}).max_rel, 1e-4 / 1e-6, 1e-3);
}

TEST(DiffMetrics, NonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto [r, c] = random_pair({100}, 1e-3);
  // NaN at the same place on both sides: counted, left out of the sums, not "new".
  r.data<double>()[3] = nan, c.data<double>()[3] = nan;
  // The same infinity on both sides: not new either.
  r.data<double>()[5] = inf, c.data<double>()[5] = inf;
  TensorMetrics m = tensor_metrics(r, c);
  EXPECT_EQ(m.nan_ref, 1);
  EXPECT_EQ(m.nan_cand, 1);
  EXPECT_EQ(m.inf_ref, 1);
  EXPECT_EQ(m.new_nonfinite, 0);
  EXPECT_EQ(m.compared, 98);
  EXPECT_TRUE(std::isfinite(m.cosine) && std::isfinite(m.rmse) && std::isfinite(m.max_abs_scaled));
  // New: a NaN the reference lacks, and an infinity of the other sign.
  c.data<double>()[10] = nan;
  c.data<double>()[5] = -inf;
  m = tensor_metrics(r, c);
  EXPECT_EQ(m.new_nonfinite, 2);
  EXPECT_EQ(m.nan_cand, 2);
  EXPECT_EQ(m.inf_cand, 1);
  EXPECT_EQ(judge_tensor({.metrics = &m}, Thresholds{}).verdict, Verdict::fail);
  // The second max_abs_scaled pass (rms(r) > 1) skips the non-finite pairs as the first does.
  scale_both(r, c, 8.0);
  m = tensor_metrics(r, c);
  ASSERT_GT(m.max_abs_scale, 1.0);
  EXPECT_TRUE(std::isfinite(m.max_abs_scaled));
  double expect = 0;
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    const double a = r.data<double>()[i], b = c.data<double>()[i];
    if (std::isfinite(a) && std::isfinite(b))
      expect = std::max(expect, std::fabs(b - a) / std::max(m.max_abs_scale, std::fabs(a)));
  }
  EXPECT_EQ(m.max_abs_scaled, expect);
  // A NaN in an f32 candidate, too (the fast kernel must notice it).
  auto [r32, c32] = random_pair({70000}, 1e-4, DType::f32);
  c32.data<float>()[69999] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(tensor_metrics(r32, c32).new_nonfinite, 1);
}

TEST(DiffMetrics, ShapeMismatchIsAnInputError) {
  EXPECT_THROW(tensor_metrics(Tensor(DType::f32, {2, 3}), Tensor(DType::f32, {3, 2})), InputError);
  EXPECT_THROW(logits_metrics(Tensor(DType::f32, {2, 3}), Tensor(DType::f32, {2, 4})), InputError);
  EXPECT_THROW(routing_metrics(Tensor(DType::i64, {2, 3}), Tensor(DType::i64, {3, 3})), InputError);
}

// Bit-identical results for 1, 2 and 3 threads.
TEST(DiffMetrics, ThreadCountIndependence) {
  auto [r, c] = random_pair({5, 65537}, 1e-3, DType::f32);
  auto [r5, c5] = random_pair({5, 65537}, 1e-3);
  scale_both(r5, c5, 4.0);  // rms(r) ~ 4: the second max_abs_scaled pass
  auto [lr, lc] = random_pair({2, 9, 301}, 0.3);
  const int saved = omp_get_max_threads();
  std::vector<TensorMetrics> ms, ms5;
  std::vector<LogitsMetrics> ls;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    ms.push_back(tensor_metrics(r, c));
    ms5.push_back(tensor_metrics(r5, c5));
    ls.push_back(logits_metrics(lr, lc));
  }
  omp_set_num_threads(saved);
  ASSERT_GT(ms5[0].max_abs_scale, 1.0);
  for (std::size_t i = 1; i < ms.size(); ++i) {
    EXPECT_EQ(std::memcmp(&ms[0], &ms[i], sizeof(TensorMetrics)), 0) << "threads " << i + 1;
    EXPECT_EQ(std::memcmp(&ms5[0], &ms5[i], sizeof(TensorMetrics)), 0) << "rms 4, threads " << i + 1;
    EXPECT_EQ(ls[0].kl_mean, ls[i].kl_mean);
    EXPECT_EQ(ls[0].kl_p99, ls[i].kl_p99);
    EXPECT_EQ(ls[0].kl_max, ls[i].kl_max);
    EXPECT_EQ(ls[0].top1_agree, ls[i].top1_agree);
    EXPECT_EQ(ls[0].topk_overlap_mean, ls[i].topk_overlap_mean);
  }
}

TEST(DiffLogits, HandComputedKlTopOneAndOverlap) {
  // Two tokens, vocabulary 4. Token 0: identical rows. Token 1: the top two swap.
  Tensor r(DType::f64, {2, 4}), c(DType::f64, {2, 4});
  const double rv[] = {1, 2, 3, 4, 0.5, 0.1, 2.0, 1.5};
  const double cv[] = {1, 2, 3, 4, 0.5, 0.1, 1.4, 2.1};
  std::memcpy(r.raw(), rv, sizeof rv);
  std::memcpy(c.raw(), cv, sizeof cv);
  const LogitsMetrics m = logits_metrics(r, c, {.worst_tokens = 1, .top_k = 2});
  auto kl = [](const double* a, const double* b) {
    double za = 0, zb = 0, s = 0;
    for (int i = 0; i < 4; ++i) za += std::exp(a[i]), zb += std::exp(b[i]);
    for (int i = 0; i < 4; ++i) s += std::exp(a[i]) / za * ((a[i] - std::log(za)) - (b[i] - std::log(zb)));
    return s;
  };
  const double kl1 = kl(rv + 4, cv + 4);
  EXPECT_EQ(m.tokens, 2);
  EXPECT_EQ(m.vocab, 4);
  EXPECT_DOUBLE_EQ(m.top1_agree, 0.5);
  EXPECT_DOUBLE_EQ(m.topk_overlap_mean, 1.0);  // same top-2 set {2, 3}, other order
  EXPECT_NEAR(m.kl_mean, kl1 / 2, 1e-15);
  EXPECT_NEAR(m.kl_max, kl1, 1e-15);
  EXPECT_NEAR(m.kl_p99, kl1, 1e-15);
  ASSERT_EQ(m.worst.size(), 1u);
  EXPECT_EQ(m.worst[0].token, 1);
  ASSERT_EQ(m.worst[0].top_ref.size(), 2u);
  EXPECT_EQ(m.worst[0].top_ref[0].id, 2);
  EXPECT_EQ(m.worst[0].top_cand[0].id, 3);
  double z = 0;
  for (int i = 4; i < 8; ++i) z += std::exp(rv[i]);
  EXPECT_NEAR(m.worst[0].top_ref[0].prob, std::exp(2.0) / z, 1e-15);
}

TEST(DiffLogits, NonFiniteTokensAreLeftOut) {
  auto [r, c] = random_pair({3, 50}, 0.01, DType::f32);
  c.data<float>()[60] = std::numeric_limits<float>::infinity();
  const LogitsMetrics m = logits_metrics(r, c);
  EXPECT_EQ(m.nonfinite_tokens, 1);
  EXPECT_TRUE(std::isfinite(m.kl_max));
  for (const auto& w : m.worst) EXPECT_NE(w.token, 1);
}

Tensor ids(Shape shape, std::vector<std::int64_t> v) {
  Tensor t(DType::i64, std::move(shape));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(std::int64_t));
  return t;
}

TEST(DiffRouting, SetsNotOrderAndFlips) {
  const Tensor r = ids({3, 2}, {0, 1, 2, 3, 4, 5});
  const Tensor c = ids({3, 2}, {1, 0, 2, 4, 6, 7});  // token 0 reordered, 1 flips one, 2 flips both
  const RoutingMetrics m = routing_metrics(r, c);
  EXPECT_EQ(m.tokens, 3);
  EXPECT_EQ(m.k, 2);
  EXPECT_EQ(m.equal_tokens, 1);
  EXPECT_EQ(m.flips, 3);
  EXPECT_DOUBLE_EQ(m.equal_share, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.mismatch_share, 2.0 / 3);
}

TEST(DiffRouting, ExactlyTiedScoresAreTiesNotMismatches) {
  const Tensor r = ids({2, 2}, {0, 1, 2, 3});
  const Tensor c = ids({2, 2}, {0, 2, 2, 0});
  Tensor scores(DType::f64, {2, 4});
  const double sv[] = {0.9, 0.5, 0.5, 0.1,   // token 0: experts 1 and 2 tie exactly -> tie
                       0.2, 0.3, 0.8, 0.7};  // token 1: 3 (0.7) swapped for 0 (0.2) -> real flip
  std::memcpy(scores.raw(), sv, sizeof sv);
  const RoutingMetrics m = routing_metrics(r, c, &scores);
  EXPECT_EQ(m.equal_tokens, 0);
  EXPECT_EQ(m.tie_tokens, 1);
  EXPECT_EQ(m.flips, 2);
  EXPECT_DOUBLE_EQ(m.mismatch_share, 0.5);
  const Tensor other(DType::f64, {3, 4});
  EXPECT_THROW(routing_metrics(r, c, &other), InputError);  // scores for 3 tokens, not 2
}

// With the candidate's own scores: a flip is explained when the candidate's choice is right
// on those scores (the top-k did its job; upstream numerics moved the scores), and not when
// its own scores rank the taken id lower (a coarser comparison, a wrong tie-break or bias).
TEST(DiffRouting, FlipsRightOnTheCandidatesOwnScoresAreExplained) {
  const Tensor r = ids({4, 1}, {0, 2, 0, 0});
  const Tensor c = ids({4, 1}, {1, 3, 1, 1});
  Tensor ref_scores(DType::f64, {4, 4}), cand_scores(DType::f64, {4, 4});
  const double rs[] = {0.501, 0.500, 0.1, 0.1,   // token 0: margin 0.001
                       0.1, 0.1, 0.9, 0.2,       // token 1: margin 0.7
                       0.501, 0.500, 0.1, 0.1,   // token 2: margin 0.001
                       0.501, 0.500, 0.1, 0.1};  // token 3: margin 0.001
  const double cs[] = {0.4995, 0.5005, 0.1, 0.1,  // its scores put 1 above 0: explained
                       0.1, 0.1, 0.89, 0.21,      // 3 (0.21) taken over 2 (0.89): not explained
                       0.5004, 0.5001, 0.1, 0.1,  // near the tie, but its scores still rank 0 first: not
                       0.1, 0.1, 0.1, 0.1};       // filled below: a NaN explains nothing
  std::memcpy(ref_scores.raw(), rs, sizeof rs);
  std::memcpy(cand_scores.raw(), cs, sizeof cs);
  cand_scores.data<double>()[12] = std::nan("");
  const RoutingMetrics m = routing_metrics(r, c, &ref_scores, &cand_scores);
  EXPECT_EQ(m.tie_tokens, 0);
  EXPECT_EQ(m.explained_tokens, 1);
  EXPECT_DOUBLE_EQ(m.mismatch_share, 1.0);
  EXPECT_DOUBLE_EQ(m.unexplained_share, 0.75);
  EXPECT_DOUBLE_EQ(m.judged_share(), 1.0);  // not replayed: every flip counts
  RoutingMetrics replayed = m;
  replayed.replayed = true;
  EXPECT_DOUBLE_EQ(replayed.judged_share(), 0.75);
  EXPECT_EQ(routing_metrics(r, c, &ref_scores).explained_tokens, 0);  // without candidate scores: unknown
  const Tensor wrong(DType::f64, {4, 3});
  EXPECT_THROW(routing_metrics(r, c, &ref_scores, &wrong), InputError);
}

// Explained means a top-k of its own scores over the whole row, not only over the swapped
// ids: here the swap itself looks right (2 over 1) but 5, which it did not take, outranks 2.
// A row that takes one id twice is no top-k either.
TEST(DiffRouting, ExplainedNeedsATopkOfTheWholeRow) {
  const Tensor r = ids({3, 2}, {1, 3, 1, 3, 1, 3});
  const Tensor c = ids({3, 2}, {3, 2, 3, 5, 3, 3});
  Tensor ref_scores(DType::f64, {3, 6}), cand_scores(DType::f64, {3, 6});
  const double rs[] = {0.0, 0.9, 0.1, 1.0, 0.2, 0.8,  // reference: 3 > 1 > 5 > 2
                       0.0, 0.9, 0.1, 1.0, 0.2, 0.8,
                       0.0, 0.9, 0.1, 1.0, 0.2, 0.8};
  const double cs[] = {0.0, 0.6, 0.7, 0.9, 0.1, 0.8,  // own: 3 > 5 > 2 > 1, took {3, 2}: not a top-k
                       0.0, 0.6, 0.7, 0.9, 0.1, 0.8,  // took {3, 5}: a top-k of its scores
                       0.0, 0.6, 0.7, 0.9, 0.1, 0.8}; // took {3, 3}
  std::memcpy(ref_scores.raw(), rs, sizeof rs);
  std::memcpy(cand_scores.raw(), cs, sizeof cs);
  const RoutingMetrics m = routing_metrics(r, c, &ref_scores, &cand_scores);
  EXPECT_EQ(m.equal_tokens, 0);
  EXPECT_EQ(m.explained_tokens, 1);
}

// The field tables cover their structs: a new statistic without a row (so in no report) fails here.
TEST(DiffMetricFields, EveryFieldHasARow) {
  EXPECT_EQ(testing::field_count<TensorMetrics>(), tensor_metric_fields().size());
  // RoutingMetrics' `flip_margins` is the verdict's input (expected.h counts them), in no report.
  EXPECT_EQ(testing::field_count<RoutingMetrics>(), routing_metric_fields().size() + 1);
  EXPECT_EQ(logits_metric_fields().size(), 9u);  // LogitsMetrics' scalars; `worst` is written apart
  auto distinct = [](auto fields) {
    for (std::size_t a = 0; a < fields.size(); ++a)
      for (std::size_t b = a + 1; b < fields.size(); ++b) {
        EXPECT_STRNE(fields[a].name, fields[b].name);
        EXPECT_FALSE(fields[a].member == fields[b].member) << fields[a].name << " " << fields[b].name;
      }
  };
  distinct(tensor_metric_fields());
  distinct(logits_metric_fields());
  distinct(routing_metric_fields());
  TensorMetrics m;
  m.rmse = 0.5;
  m.n_diff = 3;
  for (const auto& f : tensor_metric_fields()) {
    if (std::string_view(f.name) == "rmse") EXPECT_EQ(std::get<double>(f.value(m)), 0.5);
    if (std::string_view(f.name) == "n_diff") EXPECT_EQ(std::get<std::int64_t>(f.value(m)), 3);
  }
}

// rel_elem: where a tensor's largest values are exact and the rest carry a relative error,
// rel_l2 sees almost none of it and rel_elem all of it (the trained profile's massive
// activations, bf16-exact, beside rounded ordinary channels).
TEST(DiffMetrics, RelElemSeesTheErrorOfOrdinaryElementsBesideExactMassiveOnes) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> z;
  const std::int64_t n = 4096;
  Tensor r(DType::f64, {n}), c(DType::f64, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    const bool massive = i % 64 == 0;
    r.data<double>()[i] = massive ? 1024.0 : z(rng);
    c.data<double>()[i] = massive ? 1024.0 : r.data<double>()[i] * (1.0 + 1e-3 * z(rng));
  }
  const TensorMetrics m = tensor_metrics(r, c);
  EXPECT_LT(m.rel_l2, 1e-4);
  EXPECT_NEAR(m.rel_elem, 1e-3, 0.15e-3);
  EXPECT_EQ(tensor_metrics(r, r).rel_elem, 0.0);
}

}  // namespace
}  // namespace tdiff
