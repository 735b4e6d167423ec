// Verdict rules, thresholds files (good and bad) and command-line overrides.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "core/error.h"
#include "diff/thresholds.h"

namespace tdiff {
namespace {

TensorMetrics metrics(double cosine, double max_abs, double rmse = 0.0) {
  TensorMetrics m;
  m.count = m.compared = 100;
  m.cosine = cosine, m.max_abs = max_abs, m.rmse = rmse;
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
}

TEST(DiffPolicyOverride, PatternsMatchStageOrStageTensor) {
  EXPECT_TRUE(stage_matches("L0[2-4].attn.*", "L03.attn.core"));
  EXPECT_FALSE(stage_matches("L0[2-4].attn.*", "L05.attn.core"));
  EXPECT_TRUE(stage_matches("*/logits", "lm_head", "logits"));
  EXPECT_FALSE(stage_matches("*/idx", "lm_head", "logits"));
}

}  // namespace
}  // namespace tdiff
