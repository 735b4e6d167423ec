// Verdict rules, thresholds files (good and bad) and command-line overrides.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "base/dtype.h"
#include "base/error.h"
#include "diff/thresholds.h"

namespace tdiff {
namespace {

// Metrics of a tensor whose largest error lies where |r| <= 1: max_abs_scaled = max_abs.
TensorMetrics metrics(double cosine, double max_abs, double rmse = 0.0) {
  TensorMetrics m;
  m.count = m.compared = 100;
  m.cosine = cosine, m.max_abs = max_abs, m.rmse = rmse;
  m.max_abs_scaled = max_abs, m.ref_at_max_abs_scaled = 0.5;
  return m;
}

Verdict verdict_of(const TensorMetrics& m, const Thresholds& t = {}) { return judge_tensor({.metrics = &m}, t).verdict; }

TEST(DiffVerdicts, PaperDefaults) {
  EXPECT_EQ(verdict_of(metrics(0.9999, 1e-3)), Verdict::pass);
  EXPECT_EQ(verdict_of(metrics(0.9999, 0.0099)), Verdict::pass);
  EXPECT_EQ(verdict_of(metrics(0.9999, 0.01)), Verdict::warn);  // max_abs >= 1e-2
  EXPECT_EQ(verdict_of(metrics(0.9999, 0.0999)), Verdict::warn);
  EXPECT_EQ(verdict_of(metrics(0.9999, 0.1)), Verdict::fail);   // max_abs >= 1e-1
  EXPECT_EQ(verdict_of(metrics(0.9899, 1e-3)), Verdict::fail);  // cosine < 0.99
  EXPECT_EQ(verdict_of(metrics(0.99, 1e-3)), Verdict::pass);
  TensorMetrics nan = metrics(1.0, 0.0);
  nan.new_nonfinite = 1;
  EXPECT_EQ(verdict_of(nan), Verdict::fail);
}

Thresholds absolute_max_abs() {
  Thresholds t;
  set_threshold(t, "max_abs_scaled", 0);
  return t;
}

// A bf16 residual add (as the hyper-connection streams do) on values up to |x| ~ 26:
// r = a + b in float64, c = bf16(bf16(a) + bf16(b)), a and b of one sign. One rounding below
// |x| = 32 errs by at most 0.0625, so a single one never reaches 0.1; the three of this path
// do. Relative to r, bf16 (8 significant bits) errs by at most 2^-8 per rounding: a's and
// b's together by 2^-8 |r|, the sum's by 2^-8 |r| more, so max_abs_scaled < 2^-7 < 0.01.
std::pair<Tensor, Tensor> bf16_residual_add(std::int64_t n) {
  std::mt19937_64 rng(26);
  std::uniform_real_distribution<double> big(1.0, 26.0), small(0.0, 4.0);
  Tensor r(DType::f64, {n}), c(DType::f64, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    const double sign = i % 2 ? -1.0 : 1.0, a = sign * big(rng), b = sign * small(rng);
    r.data<double>()[i] = a + b;
    c.data<double>()[i] = round_to(round_to(a, DType::bf16) + round_to(b, DType::bf16), DType::bf16);
  }
  return {r, c};
}

TEST(DiffVerdicts, CorrectBf16AtLargeValuesPassesScaledFailsAbsolute) {
  const auto [r, c] = bf16_residual_add(4096);
  const TensorMetrics m = tensor_metrics(r, c);
  ASSERT_GT(m.max_abs_ref, 25.0);
  ASSERT_GE(m.max_abs, 0.1);          // what the paper's absolute rule sees
  EXPECT_LT(m.max_abs_scaled, 0x1p-7);
  EXPECT_GT(m.cosine, 0.99999);
  EXPECT_EQ(judge_tensor({.metrics = &m}, Thresholds{}).verdict, Verdict::pass);
  const Judgement absolute = judge_tensor({.metrics = &m}, absolute_max_abs());
  EXPECT_EQ(absolute.verdict, Verdict::fail);
  EXPECT_EQ(absolute.reason.rfind("max_abs 0.1", 0), 0u) << absolute.reason;
}

TEST(DiffVerdicts, BrokenTensorsStillFailScaled) {
  // An error of 0.5 on values of order 1: absolute below |r| = 1, as in the paper.
  Tensor r(DType::f64, {64}), c(DType::f64, {64});
  for (std::int64_t i = 0; i < 64; ++i) r.data<double>()[i] = c.data<double>()[i] = std::sin(0.3 * i + 0.1);
  c.data<double>()[10] += 0.5;
  TensorMetrics m = tensor_metrics(r, c);
  Judgement j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::fail);
  EXPECT_EQ(j.reason, "max_abs 0.5 >= 0.1");  // scaled and raw are the same number here
  // A 20% error at |r| = 26 among values of order 1: max_abs_scaled 0.2.
  auto [r26, c26] = bf16_residual_add(256);
  Tensor bad = c26.clone();
  r26.data<double>()[7] = -26.0, bad.data<double>()[7] = -26.0 * 1.2;
  m = tensor_metrics(r26, bad);
  EXPECT_NEAR(m.max_abs_scaled, 0.2, 1e-12);
  j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::fail);
  EXPECT_EQ(j.reason, "max_abs_scaled 0.2 (|d| 5.2 at |r| 26) >= 0.1");
  // Between the thresholds: WARN, with the scaled number named.
  bad.data<double>()[7] = -26.0 * 1.02;
  m = tensor_metrics(r26, bad);
  j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::warn);
  EXPECT_NE(j.reason.find("max_abs_scaled 0.02 (|d| 0.52 at |r| 26) >= 0.01"), std::string::npos) << j.reason;
}

// The hyper-connection collapse: x = a + b with a, b up to 26 in magnitude and often of
// opposite sign, so that some sums land near zero while the tensor's rms is ~ 15. bf16
// operands err by up to 0.0625 each; where the sum is near zero that error is all there is,
// so |d| / max(1, |r|) would read it as 10% of the value. Relative to rms(r) it is < 1%.
TEST(DiffVerdicts, CollapseOfLargeStreamsNearZeroPassesScaledByTheTensorsRms) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(-26.0, 26.0);
  const std::int64_t n = 4096;
  Tensor r(DType::f64, {n}), c(DType::f64, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = u(rng), b = i % 16 == 0 ? -a + 0.01 * u(rng) : u(rng);
    r.data<double>()[i] = a + b;
    c.data<double>()[i] = static_cast<double>(static_cast<float>(round_to(a, DType::bf16)) +
                                              static_cast<float>(round_to(b, DType::bf16)));
  }
  TensorMetrics m = tensor_metrics(r, c);
  ASSERT_GT(m.ref_rms, 10.0);
  ASSERT_GE(m.max_abs, 0.06);  // bf16 noise of the operands
  EXPECT_EQ(m.max_abs_scale, m.ref_rms);
  EXPECT_LT(m.max_abs_scaled, 0.01);
  EXPECT_EQ(judge_tensor({.metrics = &m}, Thresholds{}).verdict, Verdict::pass);
  // An error of 15% of rms(r) at a near-zero sum is not noise: FAIL, read against rms(r).
  const double scale = m.ref_rms;
  c.data<double>()[16] = r.data<double>()[16] + 0.15 * scale;
  m = tensor_metrics(r, c);
  EXPECT_NEAR(m.max_abs_scaled, 0.15, 1e-9);
  const Judgement j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::fail);
  EXPECT_NE(j.reason.find("against rms(r)"), std::string::npos) << j.reason;
}

TEST(DiffVerdicts, MaxAbsScaledIsASwitch) {
  Thresholds t;
  EXPECT_EQ(t.max_abs_scaled, 1.0);  // on by default
  set_threshold(t, "max_abs_scaled", 0);
  EXPECT_EQ(t.max_abs_scaled, 0.0);
  set_threshold(t, "max_abs_scaled", 1);
  EXPECT_EQ(t.max_abs_scaled, 1.0);
  for (double bad : {2.0, 0.5, -1.0, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_THROW(set_threshold(t, "max_abs_scaled", bad), InputError) << bad;
  try {
    set_threshold(t, "max_abs_scaled", 2);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("max_abs_scaled is a switch"), std::string::npos) << e.what();
  }
  const auto keys = threshold_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "max_abs_scaled"), keys.end());
  // Which number the rules read.
  TensorMetrics m = metrics(0.9999, 0.2);
  m.max_abs_scaled = 0.005, m.ref_at_max_abs_scaled = 26;
  EXPECT_EQ(judged_max_abs(m, Thresholds{}), 0.005);
  EXPECT_EQ(judged_max_abs(m, absolute_max_abs()), 0.2);
  EXPECT_EQ(judge_tensor({.metrics = &m}, Thresholds{}).verdict, Verdict::pass);
  EXPECT_EQ(judge_tensor({.metrics = &m}, absolute_max_abs()).reason, "max_abs 0.2 >= 0.1");
  // The scaled maximum where |r| <= 1 is an absolute error, though not the tensor's largest.
  m.max_abs_scaled = 0.05, m.ref_at_max_abs_scaled = 0.3;
  const Judgement j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::warn);
  EXPECT_EQ(j.reason, "max_abs_scaled 0.05 (|d| where |r| <= 1) >= 0.01");
}

TEST(DiffVerdicts, ReasonNamesEveryRuleOfTheWorstLevel) {
  const TensorMetrics m = metrics(0.5, 0.5);
  const Judgement j = judge_tensor({.metrics = &m}, Thresholds{});
  EXPECT_EQ(j.verdict, Verdict::fail);
  EXPECT_NE(j.reason.find("cosine"), std::string::npos);
  EXPECT_NE(j.reason.find("max_abs"), std::string::npos);
  EXPECT_EQ(j.reason.find("WARN"), std::string::npos);
}

TEST(DiffVerdicts, ExactTensorsByMismatchShare) {
  TensorMetrics m = metrics(1.0, 0.0);
  auto v = [&](std::int64_t diff) {
    m.n_diff = diff;
    return judge_tensor({.metrics = &m, .exact = true}, Thresholds{}).verdict;
  };
  EXPECT_EQ(v(0), Verdict::pass);
  EXPECT_EQ(v(1), Verdict::warn);  // 1% is not above 1%
  EXPECT_EQ(v(2), Verdict::fail);
  RoutingMetrics rt;
  rt.tokens = 10, rt.equal_tokens = 9, rt.tie_tokens = 1, rt.mismatch_share = 0.0;
  m.n_diff = 50;  // the routing share decides, not the element count
  EXPECT_EQ(judge_tensor({.metrics = &m, .routing = &rt, .exact = true}, Thresholds{}).verdict, Verdict::pass);
}

// Selection verdicts: without replay every untied flip counts against mismatch_fail; with
// replay (later stages got the reference's choices) only the flips the candidate's own scores
// do not explain, the explained ones stay a WARN.
TEST(DiffVerdicts, ReplayedSelectionsFailOnlyOnUnexplainedFlips) {
  const TensorMetrics m = metrics(1.0, 0.0);
  RoutingMetrics rt;
  rt.tokens = 100, rt.equal_tokens = 95, rt.explained_tokens = 5;
  rt.mismatch_share = 0.05, rt.unexplained_share = 0.0;
  auto judged = [&] { return judge_tensor({.metrics = &m, .routing = &rt, .exact = true}, Thresholds{}); };
  EXPECT_EQ(judged().verdict, Verdict::fail);
  rt.replayed = true;
  // Explained and replayed: what the formats explain, a note on a PASS under the tolerance
  // rule (the default) and a WARN under the max_abs rules (tolerance 0).
  const Judgement j = judged();
  EXPECT_EQ(j.verdict, Verdict::pass);
  EXPECT_NE(j.reason.find("all right on the candidate's own scores, replayed"), std::string::npos) << j.reason;
  Thresholds paper;
  set_threshold(paper, "tolerance", 0);
  EXPECT_EQ(judge_tensor({.metrics = &m, .routing = &rt, .exact = true}, paper).verdict, Verdict::warn);
  rt.explained_tokens = 3, rt.unexplained_share = 0.02;
  EXPECT_EQ(judged().verdict, Verdict::fail);
  EXPECT_NE(judged().reason.find("rank lower (2 of 5 differing)"), std::string::npos) << judged().reason;
  rt.explained_tokens = 4, rt.unexplained_share = 0.01;  // 1% is not above 1%
  EXPECT_EQ(judged().verdict, Verdict::warn);
}

// The tolerance rule: the ratio of the error to what the formats explain, rel_l2 / E and
// err_rel / E_elem, the larger deciding; WARN above 4x, FAIL above 8x; the max_abs rules
// only for tensors without an expected error.
TEST(DiffVerdicts, ToleranceRuleJudgesTheRatioToTheExpectedError) {
  ExpectedError e;
  e.rel = 1e-3, e.elem = 4e-3, e.format = "bf16";
  TensorMetrics m = metrics(0.99999, 0.5);  // a max_abs the paper's rule would FAIL
  auto judged = [&](double rel_l2, double err_rel) {
    m.rel_l2 = rel_l2, m.err_rel = err_rel;
    return judge_tensor({.metrics = &m, .expected = &e}, Thresholds{});
  };
  EXPECT_EQ(judged(3.9e-3, 1e-3).verdict, Verdict::pass);
  EXPECT_EQ(judged(4.1e-3, 1e-3).verdict, Verdict::warn);
  const Judgement fail = judged(8.5e-3, 1e-3);
  EXPECT_EQ(fail.verdict, Verdict::fail);
  EXPECT_NE(fail.reason.find("rel_l2 0.0085 = 8.5x the 0.001 expected (bf16) > 8x"), std::string::npos) << fail.reason;
  const Judgement elem = judged(1e-3, 0.04);  // one element far beyond: err_rel 10x E_elem
  EXPECT_EQ(elem.verdict, Verdict::fail);
  EXPECT_NE(elem.reason.find("err_rel 0.04"), std::string::npos) << elem.reason;
  EXPECT_DOUBLE_EQ(expected_ratio(m, e), 10.0);
  // Without an expected error, or with tolerance 0, the max_abs rules judge: max_abs 0.5 FAILs.
  EXPECT_EQ(judge_tensor({.metrics = &m}, Thresholds{}).verdict, Verdict::fail);
  m.err_rel = 1e-3;
  Thresholds off;
  set_threshold(off, "tolerance", 0);
  EXPECT_EQ(judge_tensor({.metrics = &m, .expected = &e}, off).verdict, Verdict::fail);
  // cosine and new NaN/Inf still FAIL within the tolerance.
  TensorMetrics bad = metrics(0.98, 0.0);
  EXPECT_EQ(judge_tensor({.metrics = &bad, .expected = &e}, Thresholds{}).verdict, Verdict::fail);
  EXPECT_THROW(set_threshold(off, "tolerance", 0.5), InputError);
}

TEST(DiffVerdicts, NamedThresholdSets) {
  EXPECT_EQ(load_thresholds("precision").defaults.tolerance, 1.0);
  const ThresholdPolicy paper = load_thresholds("paper");
  EXPECT_EQ(paper.defaults.tolerance, 0.0);
  EXPECT_EQ(paper.defaults.max_abs_scaled, 0.0);
  EXPECT_EQ(paper.defaults.max_abs_fail, 0.1);
  const ThresholdPolicy scaled = load_thresholds("scaled");
  EXPECT_EQ(scaled.defaults.tolerance, 0.0);
  EXPECT_EQ(scaled.defaults.max_abs_scaled, 1.0);
  try {
    load_thresholds("papr");
    ADD_FAILURE() << "no error";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("named sets: precision, scaled, paper"), std::string::npos) << err.what();
  }
}

TEST(DiffVerdicts, NoiseFloorGate) {
  const TensorMetrics floor = metrics(0.99999, 1e-4, 1e-4);
  const TensorMetrics ok = metrics(0.9999, 1e-3, 2.9e-4), bad = metrics(0.9999, 1e-3, 3.1e-4);
  EXPECT_EQ(judge_tensor({.metrics = &ok, .floor = &floor}, Thresholds{}).verdict, Verdict::pass);
  EXPECT_EQ(judge_tensor({.metrics = &bad, .floor = &floor}, Thresholds{}).verdict, Verdict::fail);
  Thresholds t;
  set_threshold(t, "floor_k", 4);
  EXPECT_EQ(judge_tensor({.metrics = &bad, .floor = &floor}, t).verdict, Verdict::pass);
}

TEST(DiffVerdicts, LogitsRules) {
  const TensorMetrics m = metrics(0.9999, 1e-3);
  LogitsMetrics l;
  l.top1_agree = 0.9, l.kl_max = 0.02;
  Thresholds t;
  EXPECT_EQ(judge_tensor({.metrics = &m, .logits = &l}, t).verdict, Verdict::pass);  // off by default
  set_threshold(t, "kl_warn", 0.01);
  EXPECT_EQ(judge_tensor({.metrics = &m, .logits = &l}, t).verdict, Verdict::warn);
  set_threshold(t, "top1_fail", 0.95);
  EXPECT_EQ(judge_tensor({.metrics = &m, .logits = &l}, t).verdict, Verdict::fail);
}

TEST(DiffVerdicts, UnknownThresholdKey) {
  Thresholds t;
  EXPECT_THROW(set_threshold(t, "cosine", 0.9), InputError);
}

// Values a threshold cannot mean are refused, naming it: negative errors, cosines outside
// [-1, 1], shares outside [0, 1]. -1 turns the cosine rule off, infinity a share or error rule.
TEST(DiffVerdicts, ThresholdsOutsideTheirRangeAreRefused) {
  Thresholds t;
  for (const auto& [key, value] : std::vector<std::pair<const char*, double>>{
           {"max_abs_fail", -1}, {"cosine_fail", -1.5}, {"cosine_warn", 1.5}, {"mismatch_fail", -0.1},
           {"mismatch_warn", 2}, {"top1_fail", 2}, {"kl_warn", -1e-9}}) {
    try {
      set_threshold(t, key, value);
      ADD_FAILURE() << key << " = " << value << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  set_threshold(t, "rel_l2_fail", std::numeric_limits<double>::infinity());
  set_threshold(t, "mismatch_fail", std::numeric_limits<double>::infinity());
  set_threshold(t, "cosine_fail", -1.0);
  EXPECT_EQ(t.cosine_fail, -1.0);
}

class ThresholdsFile : public ::testing::Test {
 protected:
  std::filesystem::path dir_;
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tdiff_thr_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text) {
    const auto p = dir_ / "t.toml";
    std::ofstream(p) << text;
    return p.string();
  }
  std::string error_of(const std::string& text) {
    try {
      load_thresholds(write(text));
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(ThresholdsFile, DefaultsRulesAndOrder) {
  const ThresholdPolicy p = load_thresholds(write(R"(
[default]
max_abs_warn = 5e-3

[[rule]]
stages = "L0[2-4].attn.*"
cosine_fail = 0.999
max_abs_warn = 1e-3

[[rule]]
stages = ["lm_head", "L03.attn.core"]
max_abs_fail = 1     # integers are numbers too
)"));
  EXPECT_EQ(p.defaults.max_abs_warn, 5e-3);
  EXPECT_EQ(p.for_tensor("L01.attn.core", "o").cosine_fail, 0.99);
  EXPECT_EQ(p.for_tensor("L01.attn.core", "o").max_abs_warn, 5e-3);
  const Thresholds l3 = p.for_tensor("L03.attn.core", "o");
  EXPECT_EQ(l3.cosine_fail, 0.999);
  EXPECT_EQ(l3.max_abs_warn, 1e-3);
  EXPECT_EQ(l3.max_abs_fail, 1.0);  // the later rule adds to the earlier one
  EXPECT_EQ(p.for_tensor("L05.attn.core", "o").cosine_fail, 0.99);
  EXPECT_EQ(p.for_tensor("lm_head", "logits").max_abs_fail, 1.0);
  EXPECT_NO_THROW(p.check_patterns({"L03.attn.core/o", "lm_head/logits"}));
  EXPECT_THROW(p.check_patterns({"L01.attn.core/o", "lm_head/logits"}), InputError);  // L0[2-4] matches nothing
}

TEST_F(ThresholdsFile, MaxAbsScaledInDefaultAndRules) {
  const ThresholdPolicy p = load_thresholds(write(R"(
[default]
max_abs_scaled = 0      # the paper's absolute rule everywhere ...

[[rule]]
stages = "L*.hc_*"
max_abs_scaled = 1      # ... but the hyper-connection streams judged relative to |r|
)"));
  EXPECT_EQ(p.defaults.max_abs_scaled, 0.0);
  EXPECT_EQ(p.for_tensor("L01.attn.core", "o").max_abs_scaled, 0.0);
  EXPECT_EQ(p.for_tensor("L01.hc_attn.pre", "x").max_abs_scaled, 1.0);
  const std::string error = error_of("[default]\nmax_abs_scaled = 2\n");
  EXPECT_NE(error.find("t.toml:2"), std::string::npos) << error;
  EXPECT_NE(error.find("max_abs_scaled is a switch"), std::string::npos) << error;
}

TEST_F(ThresholdsFile, BadFilesNameTheProblem) {
  EXPECT_NE(error_of("[[rule]\nstages = 'x'").find("t.toml:"), std::string::npos);  // syntax, with a line
  EXPECT_NE(error_of("[default]\ncosine = 0.9\n").find("unknown threshold 'cosine'"), std::string::npos);
  EXPECT_NE(error_of("[default]\nmax_abs_warn = 'big'\n").find("expected a number"), std::string::npos);
  EXPECT_NE(error_of("[[rule]]\nmax_abs_warn = 1e-3\n").find("no 'stages'"), std::string::npos);
  EXPECT_NE(error_of("[[rule]]\nstages = 3\nmax_abs_warn = 1e-3\n").find("stages"), std::string::npos);
  EXPECT_NE(error_of("[defaults]\nmax_abs_warn = 1e-3\n").find("unknown section 'defaults'"), std::string::npos);
  EXPECT_THROW(load_thresholds((dir_ / "missing.toml").string()), InputError);
}

TEST(DiffPolicyOverride, CommandLineRules) {
  ThresholdPolicy p;
  add_threshold_override(p, "L01.*:max_abs_warn=1e-3,cosine_fail=0.999");
  add_threshold_override(p, "max_abs_fail=0.5");
  const Thresholds t = p.for_tensor("L01.attn.core", "o");
  EXPECT_EQ(t.max_abs_warn, 1e-3);
  EXPECT_EQ(t.cosine_fail, 0.999);
  EXPECT_EQ(t.max_abs_fail, 0.5);
  EXPECT_EQ(p.for_tensor("L02.attn.core", "o").max_abs_warn, 1e-2);
  EXPECT_THROW(add_threshold_override(p, "foo=1"), InputError);
  EXPECT_THROW(add_threshold_override(p, "L01.*:max_abs_warn=abc"), InputError);
  EXPECT_THROW(add_threshold_override(p, "L01.*:max_abs_warn"), InputError);
  add_threshold_override(p, "L01.hc_*:max_abs_scaled=0");
  EXPECT_EQ(p.for_tensor("L01.hc_ffn.pre", "x").max_abs_scaled, 0.0);
  EXPECT_EQ(p.for_tensor("L01.attn.core", "o").max_abs_scaled, 1.0);
  EXPECT_THROW(add_threshold_override(p, "max_abs_scaled=2"), InputError);
}

TEST(DiffPolicyOverride, PatternsMatchStageOrStageTensor) {
  EXPECT_TRUE(stage_matches("L0[2-4].attn.*", "L03.attn.core"));
  EXPECT_FALSE(stage_matches("L0[2-4].attn.*", "L05.attn.core"));
  EXPECT_TRUE(stage_matches("*/logits", "lm_head", "logits"));
  EXPECT_FALSE(stage_matches("*/idx", "lm_head", "logits"));
}

}  // namespace
}  // namespace tdiff
