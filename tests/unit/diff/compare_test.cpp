// The diff engine on tensor maps and on real HDF5 files written with H5Writer.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/error.h"
#include "casefile/h5io.h"
#include "diff/compare.h"

namespace tdiff {
namespace {

// Deterministic, never-zero values; `noise` shifts the candidate by a fixed pattern.
Tensor values(Shape shape, double offset, double noise = 0.0) {
  Tensor t(DType::f32, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + offset) + 0.1 +
                                            noise * std::cos(1.3 * static_cast<double>(i)));
  return t;
}

Tensor selection(std::int64_t tokens, std::int64_t k, int flip_token = -1) {
  Tensor t(DType::i64, {tokens, k});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int64_t>()[i] = i % 8;
  if (flip_token >= 0) t.data<std::int64_t>()[flip_token * k] = 7 + 100;
  return t;
}

TEST(DiffCompare, MapsPairByNameInModelOrder) {
  NamedTensors ref = {{"L01.attn.core/o", values({4, 8}, 1)},
                   {"embed/e", values({4, 8}, 0)},
                   {"L00.attn.core/o", values({4, 8}, 2)},
                   {"lm_head/logits", values({2, 3, 20}, 3)},
                   {"L00.moe.select/idx", selection(4, 2)},
                   {"L00.only_ref/x", values({2}, 0)}};
  NamedTensors cand = {{"L01.attn.core/o", values({4, 8}, 1, 0.5)},  // broken
                    {"embed/e", values({4, 8}, 0)},
                    {"L00.attn.core/o", values({4, 8}, 2, 0.02)},  // WARN: max_abs ~0.02
                    {"lm_head/logits", values({2, 3, 20}, 3, 1e-4)},
                    {"L00.moe.select/idx", selection(4, 2, 1)},
                    {"L02.only_cand/y", values({2}, 0)}};
  CompareResult r = compare_maps(ref, cand);
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.rows[0].key(), "embed/e");
  EXPECT_EQ(r.rows[1].key(), "L00.attn.core/o");
  EXPECT_EQ(r.rows[2].key(), "L00.moe.select/idx");
  EXPECT_EQ(r.rows[3].key(), "L01.attn.core/o");
  EXPECT_EQ(r.rows[4].key(), "lm_head/logits");
  EXPECT_EQ(r.rows[2].kind, TensorKind::routing);
  EXPECT_EQ(r.rows[4].kind, TensorKind::logits);
  ASSERT_TRUE(r.rows[4].logits.has_value());
  EXPECT_EQ(r.rows[4].logits->tokens, 6);
  EXPECT_EQ(r.only_ref, std::vector<std::string>{"L00.only_ref/x"});
  EXPECT_EQ(r.only_cand, std::vector<std::string>{"L02.only_cand/y"});

  judge(r, ThresholdPolicy{});
  EXPECT_EQ(r.rows[0].verdict, Verdict::pass);
  EXPECT_EQ(r.rows[1].verdict, Verdict::warn);
  EXPECT_EQ(r.rows[2].verdict, Verdict::fail);  // 1 of 4 tokens routed elsewhere
  EXPECT_EQ(r.rows[3].verdict, Verdict::fail);
  EXPECT_EQ(r.first_fail, 2);
  EXPECT_EQ(r.verdict, Verdict::fail);
}

TEST(DiffCompare, GivenStageOrderWinsAndUnknownStagesFollow) {
  const auto keys = order_keys({"b/x", "zzz/y", "a/x", "L00.q/x", "lm_head/logits"}, {"b", "a"});
  EXPECT_EQ(keys, (std::vector<std::string>{"b/x", "a/x", "zzz/y", "L00.q/x", "lm_head/logits"}));
  EXPECT_EQ(order_keys({"L10.a/x", "L9.a/x", "final.norm/out", "embed/e"}, {}),
            (std::vector<std::string>{"embed/e", "L9.a/x", "L10.a/x", "final.norm/out"}));
}

TEST(DiffCompare, OneSideOnlyStillWarnsTheRun) {
  NamedTensors ref = {{"a/x", values({3}, 0)}, {"b/x", values({3}, 1)}};
  NamedTensors cand = {{"a/x", values({3}, 0)}};
  CompareResult r = compare_maps(ref, cand);
  judge(r, ThresholdPolicy{});
  EXPECT_EQ(r.rows[0].verdict, Verdict::pass);
  EXPECT_EQ(r.verdict, Verdict::warn);
}

TEST(DiffCompare, StagesFilterAndErrors) {
  NamedTensors ref = {{"L00.attn.q/x", values({3}, 0)}, {"L01.attn.q/x", values({3}, 1)}};
  CompareOptions opt;
  opt.stages = "L01.*";
  EXPECT_EQ(compare_maps(ref, ref, opt).rows.size(), 1u);
  opt.stages = "L09.*";
  EXPECT_THROW(compare_maps(ref, ref, opt), InputError);
  EXPECT_THROW(compare_maps(ref, {{"other/x", values({3}, 0)}}), InputError);  // nothing in common
  // Another shape is a row of its own (judged FAIL), not an error; the other pair is compared.
  const CompareResult shapes = compare_maps(ref, {{"L00.attn.q/x", values({4}, 0)}, {"L01.attn.q/x", values({3}, 1)}});
  ASSERT_EQ(shapes.rows.size(), 2u);
  EXPECT_EQ(shapes.rows[0].shape_cand, Shape{4});
  EXPECT_FALSE(shapes.rows[1].shape_cand);
  EXPECT_EQ(shapes.rows[1].metrics.cosine, 1.0);
}

TEST(DiffCompare, NoiseFloorRun) {
  NamedTensors ref = {{"a/x", values({64}, 0)}};
  NamedTensors floor_run = {{"a/x", values({64}, 0, 1e-4)}};
  NamedTensors cand = {{"a/x", values({64}, 0, 5e-4)}};  // 5x the floor's error
  CompareResult floor = compare_maps(ref, floor_run), r = compare_maps(ref, cand);
  judge(r, ThresholdPolicy{});
  EXPECT_EQ(r.verdict, Verdict::pass);
  judge(r, ThresholdPolicy{}, &floor);
  EXPECT_EQ(r.verdict, Verdict::fail);
  ASSERT_TRUE(r.rows[0].floor_rmse.has_value());
  EXPECT_NE(r.rows[0].reason.find("floor"), std::string::npos);
}

class DiffCompareFiles : public ::testing::Test {
 protected:
  std::filesystem::path dir_;
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tdiff_cmp_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
};

TEST_F(DiffCompareFiles, GroupsMissingDatasetsAndShapes) {
  const std::string a = (dir_ / "a.h5").string(), b = (dir_ / "b.h5").string();
  {
    H5Writer w(a);
    w.write("/reference/embed/e", values({4, 6}, 0).to(DType::f64));
    w.write("/reference/L00.attn.core/o", values({2, 4, 6}, 1).to(DType::f64));
    w.write("/reference/L00.attn.idx.topk/sel", selection(5, 2));
    w.write("/reference/L00.attn.idx.score/score", values({5, 8}, 2));
    w.write("/reference/lm_head/logits", values({1, 3, 11}, 3).to(DType::f64));
    w.write("/inputs/ids", selection(1, 3));
    w.commit();
  }
  {
    H5Writer w(b);
    w.write("/embed/e", values({4, 6}, 0));
    w.write("/L00.attn.core/o", values({2, 4, 6}, 1, 1e-3));
    w.write("/L00.attn.idx.topk/sel", selection(5, 2));
    w.write("/lm_head/logits", values({1, 3, 11}, 3, 1e-3));
    w.write("/extra/t", values({2}, 0));
    w.commit();
  }
  CompareResult r = compare_files(a, "/reference", b, "/");
  EXPECT_EQ(r.label_ref, a + ":/reference");
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0].key(), "embed/e");
  EXPECT_EQ(r.rows[0].dtype_ref, DType::f64);
  EXPECT_EQ(r.rows[0].dtype_cand, DType::f32);
  EXPECT_EQ(r.rows[0].metrics.max_abs, 0.0);  // f32 values widened exactly
  EXPECT_EQ(r.rows[2].kind, TensorKind::routing);
  EXPECT_EQ(r.rows[3].kind, TensorKind::logits);
  EXPECT_EQ(r.only_ref, std::vector<std::string>{"L00.attn.idx.score/score"});
  EXPECT_EQ(r.only_cand, std::vector<std::string>{"extra/t"});
  judge(r, ThresholdPolicy{});
  EXPECT_EQ(r.verdict, Verdict::warn);  // all PASS, but tensors on one side only

  // Size-1 dimensions are squeezed before judging: [3,11] against [1,3,11] compares normally.
  {
    H5Writer w(b, b);
    w.write("/lm_head/logits", values({3, 11}, 3, 1e-3));
    w.commit();
  }
  r = compare_files(a, "/reference", b, "/");
  judge(r, ThresholdPolicy{});
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_FALSE(r.rows[3].shape_cand);
  EXPECT_EQ(r.rows[3].shape, (Shape{1, 3, 11}));
  EXPECT_EQ(r.rows[3].kind, TensorKind::logits);
  EXPECT_EQ(r.rows[3].verdict, Verdict::pass) << r.rows[3].reason;

  // Other shapes: that pair is one FAIL row naming both shapes; the others are still compared.
  {
    H5Writer w(b, b);
    w.write("/embed/e", values({6, 4}, 0));
    w.commit();
  }
  r = compare_files(a, "/reference", b, "/");
  judge(r, ThresholdPolicy{});
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0].key(), "embed/e");
  ASSERT_TRUE(r.rows[0].shape_cand);
  EXPECT_EQ(*r.rows[0].shape_cand, (Shape{6, 4}));
  EXPECT_EQ(r.rows[0].verdict, Verdict::fail);
  EXPECT_EQ(r.rows[0].reason, "shape mismatch: reference [4,6] vs candidate [6,4]");
  EXPECT_EQ(r.first_fail, 0);
  EXPECT_EQ(r.verdict, Verdict::fail);
  for (std::size_t i = 1; i < r.rows.size(); ++i) EXPECT_EQ(r.rows[i].verdict, Verdict::pass) << r.rows[i].key();
}

}  // namespace
}  // namespace tdiff
