// Token verdicts (diff/token_verdicts.h) on hand-made logits: each verdict at the bound's edge,
// the first divergent step, repetition loops counted only where the reference has none, and
// the fallback without an expected error.
#include <gtest/gtest.h>

#include "diff/thresholds.h"
#include "diff/token_verdicts.h"

namespace tdiff {
namespace {

// [1, steps, 4] logits: each step's row is {a, b, 0, 0}.
Tensor logits(const std::vector<std::pair<double, double>>& rows) {
  Tensor t(DType::f64, {1, static_cast<std::int64_t>(rows.size()), 4});
  for (std::size_t s = 0; s < rows.size(); ++s) {
    t.data<double>()[s * 4] = rows[s].first, t.data<double>()[s * 4 + 1] = rows[s].second;
    t.data<double>()[s * 4 + 2] = t.data<double>()[s * 4 + 3] = 0.0;
  }
  return t;
}

std::vector<std::int64_t> all_steps(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  return p;
}

TEST(TokenVerdicts, EachVerdictAtTheBound) {
  // Reference rows {4, 3.9, 0, 0} (gap 0.1) and {4, 2, 0, 0} (gap 2); rms about 2.8 and 2.2.
  const Tensor ref = logits({{4, 3.9}, {4, 2}, {4, 2}, {4, 2}});
  const Tensor cand = logits({{3.88, 3.92}, {1.9, 2.1}, {4, 2}, {4.6, 2}});
  ExpectedError e;
  e.rel = 1e-3;  // bound = 8 * sqrt(2) * 1e-3 * rms: 0.032 and 0.025
  TokenSteps t = token_steps(ref, cand, all_steps(4));
  classify_tokens(t, &e, 8.0);
  ASSERT_TRUE(t.bounded);
  EXPECT_EQ(t.steps[0].verdict, TokenVerdict::wrong) << "gap 0.1 > bound " << t.steps[0].bound;
  EXPECT_EQ(t.steps[1].verdict, TokenVerdict::wrong);
  EXPECT_EQ(t.steps[2].verdict, TokenVerdict::match);
  EXPECT_EQ(t.steps[3].verdict, TokenVerdict::drift) << "log p moved by about 0.07";
  EXPECT_EQ(t.first_divergent, 0);

  e.rel = 0.01;  // bound 0.32 at step 0: the 0.1 gap is within it
  classify_tokens(t, &e, 8.0);
  EXPECT_EQ(t.steps[0].verdict, TokenVerdict::tie_flip);
  EXPECT_EQ(t.steps[1].verdict, TokenVerdict::wrong);
  EXPECT_EQ(t.steps[3].verdict, TokenVerdict::match) << "0.07 within a bound of 0.25";
  EXPECT_EQ(t.counts, (std::array<std::int64_t, 4>{2, 0, 1, 1}));
  EXPECT_NE(token_summary(t).find("first divergent: step 0 (row 0, position 0): TIE-FLIP -> 1 instead of 0"),
            std::string::npos)
      << token_summary(t);
}

TEST(TokenVerdicts, WithoutAnExpectedErrorOnlyExactTiesAreTieFlips) {
  const Tensor ref = logits({{4, 4}, {4, 3.99}, {4, 2}});
  const Tensor cand = logits({{3.9, 4.1}, {3.9, 4.1}, {4.5, 2}});
  TokenSteps t = token_steps(ref, cand, all_steps(3));
  classify_tokens(t, nullptr, 8.0);
  EXPECT_FALSE(t.bounded);
  EXPECT_EQ(t.steps[0].verdict, TokenVerdict::tie_flip);
  EXPECT_EQ(t.steps[1].verdict, TokenVerdict::wrong);
  EXPECT_EQ(t.steps[2].verdict, TokenVerdict::match) << "no DRIFT without a bound";
}

TEST(TokenVerdicts, RepetitionAtTheEnd) {
  EXPECT_EQ(repetition_at_end({1, 2, 3, 4, 5}).repeats, 0);
  const RepetitionLoop two = repetition_at_end({9, 1, 2, 1, 2, 1, 2});
  EXPECT_EQ(two.ngram, 2);
  EXPECT_EQ(two.repeats, 3);
  EXPECT_EQ(two.from_step, 1);
  const RepetitionLoop one = repetition_at_end({5, 7, 7, 7, 7});
  EXPECT_EQ(one.ngram, 1);
  EXPECT_EQ(one.repeats, 4);
  EXPECT_EQ(repetition_at_end({1, 2, 1, 2}).repeats, 0) << "two repeats are not a loop";
}

TEST(TokenVerdicts, ALoopCountsOnlyWhereTheReferenceHasNone) {
  // The candidate's top-1 alternates 0, 1 from step 2 on; the reference's does not.
  const Tensor ref = logits({{4, 2}, {2, 4}, {4, 2}, {4, 2}, {2, 4}, {2, 4}, {4, 2}, {4, 2}});
  const Tensor cand = logits({{4, 2}, {2, 4}, {4, 2}, {2, 4}, {4, 2}, {2, 4}, {4, 2}, {2, 4}});
  TokenSteps t = token_steps(ref, cand, all_steps(8));
  classify_tokens(t, nullptr, 8.0);
  ASSERT_EQ(t.loops.size(), 1u);
  EXPECT_EQ(t.loops[0].ngram, 2);
  EXPECT_EQ(t.loops[0].from_step, 0);
  // The same tokens on both sides: the reference loops too, no finding.
  TokenSteps same = token_steps(cand, cand, all_steps(8));
  classify_tokens(same, nullptr, 8.0);
  EXPECT_TRUE(same.loops.empty());
}

TEST(TokenVerdicts, JudgedIntoTheLogitsRow) {
  const Tensor ref = logits({{4, 2}, {4, 2}});
  const Tensor cand = logits({{1.9, 2.1}, {4, 2}});
  TokenSteps t = token_steps(ref, cand, all_steps(2));
  ExpectedError e;
  e.rel = 1e-3;
  classify_tokens(t, &e, 8.0);
  TensorMetrics m;
  m.cosine = 1, m.rel_l2 = 0, m.err_rel = 0;
  JudgeInput in;
  in.metrics = &m;
  in.expected = &e;
  in.tokens = &t;
  const Judgement j = judge_tensor(in, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::fail);
  EXPECT_NE(j.reason.find("1 of 2 generated tokens WRONG"), std::string::npos) << j.reason;
}

}  // namespace
}  // namespace tdiff
