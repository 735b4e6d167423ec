// Row slices (exec/row_slice.h): one row of a padded batch, with its real tokens and the
// compressed entries and selections of its own.
#include <gtest/gtest.h>

#include "exec/row_slice.h"
#include "casefile/case_file.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

TEST(RowSlice, TakesTheRowsRealTokensAndOwnEntries) {
  ModelConfig c = synth_preset("tiny");
  PromptSet ps;
  ps.ids = {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11, 12}};
  ps.lines = {"", ""};
  ps.line_no = {1, 2};
  const Batch b = pad_prompts(ps, 10, true, c.vocab_size);  // row 0: 7 padding tokens on the left
  const auto stages = build_stages(c);
  auto stage = [&](const std::string& name) {
    return *std::find_if(stages.begin(), stages.end(), [&](const Stage& s) { return s.name == name; });
  };
  // A [B,S,D] token tensor: row 0's real tokens are 7..9.
  Tensor t(DType::f64, {2, 10, 2});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  Tensor s0 = row_slice(stage("L00.attn_norm"), t, b, 0, c);
  ASSERT_EQ(s0.shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(s0.data<double>()[0], 14.0);
  // Flat [B*S, E] router logits: row 1 is rows 11..19.
  Tensor r(DType::f64, {20, 8});
  for (std::int64_t i = 0; i < r.numel(); ++i) r.data<double>()[i] = static_cast<double>(i);
  Tensor s1 = row_slice(stage("L01.moe.router"), r, b, 1, c);
  ASSERT_EQ(s1.shape(), (Shape{9, 8}));
  EXPECT_EQ(s1.data<double>()[0], 88.0);
  // Compressed CSA entries [B, S/4, d]: row 0 (3 tokens) owns none, row 1 (9 tokens) two.
  Tensor e(DType::f64, {2, 2, 32});
  EXPECT_EQ(row_slice(stage("L01.attn.cmp.pool"), e, b, 0, c).dim(1), 0);
  EXPECT_EQ(row_slice(stage("L01.attn.cmp.pool"), e, b, 1, c).dim(1), 2);
  // Window mask [B,S,S]: real queries x real keys.
  Tensor m(DType::boolean, {2, 10, 10});
  EXPECT_EQ(row_slice(stage("mask.window"), m, b, 0, c).shape(), (Shape{1, 3, 3}));
  // Indexer selection [B,S,k]: sorted ids, -1 padded to index_topk whatever k was.
  Tensor sel(DType::i64, {2, 10, 2});
  auto* v = sel.data<std::int64_t>();
  for (std::int64_t i = 0; i < sel.numel(); ++i) v[i] = i % 2 == 0 ? 1 : 0;
  Tensor ss = row_slice(stage("L01.attn.idx.topk"), sel, b, 1, c);
  ASSERT_EQ(ss.shape(), (Shape{1, 9, c.index_topk}));
  EXPECT_EQ(ss.data<std::int64_t>()[0], 0);
  EXPECT_EQ(ss.data<std::int64_t>()[1], 1);
  EXPECT_EQ(ss.data<std::int64_t>()[2], -1);
}
}  // namespace
}  // namespace tdiff
