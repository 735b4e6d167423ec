// Where an element sits in the model's terms (diff/location.h): on the tensor contract's axes
// of the tiny preset for a padded batch of two rows, for every stage output, in the full
// layout and judged on real rows only (a padded dump); and which element a report points at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "diff/compare.h"
#include "diff/location.h"
#include "diff/real_rows.h"
#include "model/tensor_contract.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

constexpr std::int64_t kSeq = 48, kRealInRow0 = 30;

// Row 0 of 30 real tokens and 18 of right padding, row 1 of 48: row 1's rows come after padding.
Batch padded_batch(std::int64_t vocab) {
  Tensor ids(DType::i64, {2, kSeq}), mask(DType::u8, {2, kSeq});
  for (std::int64_t i = 0; i < 2 * kSeq; ++i) {
    ids.data<std::int64_t>()[i] = i % vocab;
    mask.data<std::uint8_t>()[i] = i >= kSeq || i < kRealInRow0;
  }
  return Batch::make(ids, mask, vocab, "test");
}

class DiffLocation : public ::testing::Test {
 protected:
  ModelConfig config = synth_preset("tiny");
  std::vector<Stage> stages = build_stages(config);
  Batch batch = padded_batch(config.vocab_size);
  Locator locator{stages, config, batch};
  TensorContract contract{stages, config, 2, kSeq};

  std::string at(const std::string& key, const std::vector<std::int64_t>& idx) const {
    const TensorSpec* spec = contract.find(key);
    EXPECT_NE(spec, nullptr) << key;
    if (!spec) return "";
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) flat = flat * spec->axes[d].size + idx[d];
    return location_text(locator.locate(key, spec->shape(), flat));
  }
};

TEST_F(DiffLocation, TheUsersExamples) {
  const std::int64_t d = config.head_dim;
  // Heads of the attention output, not the padded row's token as a row.
  EXPECT_EQ(at("L02.attn.core/o", {0, 13, 1, 28}), "row 0, token 13, head 1, ch 28");
  // hc_head's output is [B,S,D]: channels, not streams; its weights [B,S,n_hc] are streams.
  EXPECT_EQ(at("final.hc_head/y", {1, 20, 43}), "row 1, token 20, ch 43");
  EXPECT_EQ(at("final.hc_head/preh", {1, 20, 3}), "row 1, token 20, stream 3");
  // The same element judged on the real rows only: row 0's 30 real rows come first.
  const Shape kept = {kRealInRow0 + kSeq, config.num_attention_heads, d};
  EXPECT_EQ(
      location_text(locator.locate("L02.attn.core/o", kept, ((kRealInRow0 + 5) * config.num_attention_heads + 2) * d + 7)),
      "row 1, token 5, head 2, ch 7");
}

TEST_F(DiffLocation, EveryKindOfLayout) {
  const std::int64_t N = 2 * kSeq;
  EXPECT_EQ(at("L00.hc_attn.post/X", {1, 40, 3, 9}), "row 1, token 40, stream 3, ch 9");
  EXPECT_EQ(at("L00.hc_attn.sinkhorn/comb", {0, 5, 2, 1}), "row 0, token 5, from stream 2, to stream 1");
  EXPECT_EQ(at("L01.moe.router/score", {kSeq + 12, 5}), "row 1, token 12, expert 5");
  EXPECT_EQ(at("L01.moe.experts/routed", {N - 1, 3}), "row 1, token 47, ch 3");
  EXPECT_EQ(at("L01.moe.select/idx", {kSeq + 3, 1}), "row 1, token 3, slot 1");
  EXPECT_EQ(at("L02.attn.o_a/out", {0, 2, config.o_lora_rank + 4}), "row 0, token 2, group 1, ch 4");
  EXPECT_EQ(at("mask.window/mask", {1, 7, 3}), "row 1, query 7, key 3");
  EXPECT_EQ(at("lm_head/logits", {1, 2, 17}), "row 1, token 2, vocab 17");
}

// The axes of every stage output of the tiny model, planted at row 1 and a real token (or
// entry 0), the last index of every other axis: each axis is named (no "dim"), the indices read
// back, and the tensor judged on its real rows only gives the same location.
TEST_F(DiffLocation, EveryStageOutputInFullAndOnRealRows) {
  int located = 0, compacted = 0;
  for (const TensorSpec& spec : contract.specs()) {
    SCOPED_TRACE(spec.key() + " " + spec.axes_str());
    const Shape full = spec.shape();
    if (shape_numel(full) == 0) continue;  // a compressed layer without entries
    std::vector<std::int64_t> idx;
    for (std::size_t d = 0; d < spec.axes.size(); ++d) {
      const Axis& a = spec.axes[d];
      if (d == 0 && a.name == "B")
        idx.push_back(1);
      else if (d == 0 && a.name == "N")
        idx.push_back(kSeq + 7);
      else if (d == 1 && a.name == "S")
        idx.push_back(7);
      else if (d == 1 && a.name == "n")
        idx.push_back(0);
      else
        idx.push_back(a.size - 1);
    }
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) flat = flat * full[d] + idx[d];
    const Location loc = locator.locate(spec.key(), full, flat);
    // Read the indices back: N as row and token, G*R_o as group and channel, 2d as window and channel.
    std::vector<std::int64_t> back;
    for (std::size_t i = 0, d = 0; i < loc.size(); ++i, ++d) {
      EXPECT_FALSE(loc[i].first.starts_with("dim")) << location_text(loc);
      ASSERT_LT(d, full.size()) << location_text(loc);
      const std::string& a = spec.axes[d].name;
      std::int64_t v = loc[i].second;
      if (a == "N") v = v * kSeq + loc[++i].second;
      if (a == "G*R_o") v = v * (full[d] / config.o_groups) + loc[++i].second;
      if (a.starts_with("2")) v = v * (full[d] / 2) + loc[++i].second;
      back.push_back(v);
    }
    EXPECT_EQ(back, idx) << location_text(loc);
    if (spec.axes[0].name == "B" || spec.axes[0].name == "N")
      EXPECT_EQ(loc[0], (std::pair<std::string, std::int64_t>{"row", 1}));
    ++located;
    // Judged on real rows only: the rows a padded dump keeps.
    const auto stage = std::find_if(stages.begin(), stages.end(), [&](const Stage& s) { return s.name == spec.stage; });
    const RealRows rows = real_rows(full, batch, real_rows_rate(*stage, config));
    if (rows.count() == rows.rows) continue;
    std::int64_t kept_row = 0, row = flat / rows.row_size;
    for (std::int64_t r = 0; r < row; ++r) kept_row += rows.real[static_cast<std::size_t>(r)];
    Shape kept = {rows.count()};
    kept.insert(kept.end(), rows.inner.begin(), rows.inner.end());
    EXPECT_EQ(location_text(locator.locate(spec.key(), kept, kept_row * rows.row_size + flat % rows.row_size)),
              location_text(loc));
    ++compacted;
  }
  EXPECT_GT(located, 150);
  EXPECT_GT(compacted, 100);
}

TEST_F(DiffLocation, SizeOneDimensionsAndPlainDimensions) {
  // A capture that kept or dropped a batch dimension of 1 is compared in the reference's shape;
  // a shape that fits neither the full layout nor its real rows, a key of no stage and no case
  // at all give plain dimensions.
  EXPECT_EQ(location_text(locator.locate("final.hc_head/y", {1, 2, kSeq, 64}, kSeq * 64 + 3)), "row 1, token 0, ch 3");
  EXPECT_EQ(location_text(locator.locate("final.hc_head/y", {6, 2}, 3)), "dim0 1, dim1 1");
  EXPECT_EQ(location_text(locator.locate("logits", {2, 3}, 4)), "dim0 1, dim1 1");
  EXPECT_EQ(location_text(Locator().locate("L02.attn.core/o", {2, 3}, 4)), "dim0 1, dim1 1");
  EXPECT_EQ(location_text(locator.locate("final.hc_head/y", {2, kSeq, 64}, -1)), "");
  EXPECT_EQ(location_text(locator.locate("final.hc_head/y", {2, kSeq, 64}, 2 * kSeq * 64)), "");
}

TEST(DiffPointedElement, ANewNaNIsPointedAtNotTheLargestFiniteError) {
  Tensor r(DType::f64, {3, 100}), c(DType::f64, {3, 100});
  for (std::int64_t i = 0; i < 300; ++i) r.data<double>()[i] = c.data<double>()[i] = 1.0 + i * 0.01;
  c.data<double>()[10] += 5.0;  // the largest finite error
  c.data<double>()[217] = std::numeric_limits<double>::quiet_NaN();
  c.data<double>()[250] = std::numeric_limits<double>::infinity();
  TensorDiff d;
  d.stage = "x", d.shape = {3, 100};
  d.metrics = tensor_metrics(r, c);
  EXPECT_EQ(d.metrics.argmax_err_rel, 10);
  EXPECT_EQ(d.metrics.first_new_nonfinite, 217);
  const PointedElement e = pointed_element(d);
  EXPECT_EQ(e.what, Pointed::new_nan);
  EXPECT_EQ(e.flat, 217);
  EXPECT_DOUBLE_EQ(e.ref, 1.0 + 217 * 0.01);
  EXPECT_EQ(location_text(locate_pointed(nullptr, d, e)), "dim0 2, dim1 17");
  c.data<double>()[217] = 3.0;  // only the Inf is new now
  d.metrics = tensor_metrics(r, c);
  EXPECT_EQ(pointed_element(d).what, Pointed::new_inf);
  EXPECT_EQ(pointed_element(d).flat, 250);
  // A NaN both sides have is not new: the largest finite error again.
  r.data<double>()[250] = c.data<double>()[250] = std::numeric_limits<double>::quiet_NaN();
  d.metrics = tensor_metrics(r, c);
  EXPECT_EQ(pointed_element(d).what, Pointed::largest_error);
  EXPECT_EQ(pointed_element(d).flat, 10);
}

TEST(DiffPointedElement, NewNaNsInLaterChunksAreFoundInOrder) {
  // Chunks of 65,536 elements are scanned in parallel: the first new NaN is still the first.
  Tensor r(DType::f32, {300000}), c(DType::f32, {300000});
  for (std::int64_t i = 0; i < 300000; ++i) r.data<float>()[i] = c.data<float>()[i] = 1.0f;
  c.data<float>()[299999] = std::numeric_limits<float>::quiet_NaN();
  c.data<float>()[140000] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(tensor_metrics(r, c).first_new_nonfinite, 140000);
}

TEST(DiffPointedElement, ASelectionsFirstOtherTokenAndItsFirstUnexplainedOne) {
  // Four tokens choosing 2 of 4 experts; tokens 1 and 3 differ; token 1's choice is right on
  // the candidate's own scores (explained), token 3's is not.
  Tensor ref(DType::i64, {4, 2}), cand(DType::i64, {4, 2}), rs(DType::f64, {4, 4}), cs(DType::f64, {4, 4});
  const std::int64_t a[] = {0, 1, 0, 1, 0, 1, 0, 1}, b[] = {0, 1, 0, 2, 0, 1, 0, 3};
  std::copy(a, a + 8, ref.data<std::int64_t>());
  std::copy(b, b + 8, cand.data<std::int64_t>());
  const double s[] = {4, 3, 2, 1};
  for (std::int64_t t = 0; t < 4; ++t)
    for (std::int64_t e = 0; e < 4; ++e) rs.data<double>()[t * 4 + e] = cs.data<double>()[t * 4 + e] = s[e];
  std::swap(cs.data<double>()[4 + 1], cs.data<double>()[4 + 2]);  // token 1 prefers expert 2 on its own scores
  TensorDiff d;
  d.stage = "L01.moe.select", d.tensor = "idx", d.kind = TensorKind::routing, d.shape = {4, 2};
  d.routing = routing_metrics(ref, cand, &rs, &cs);
  EXPECT_EQ(d.routing->first_mismatch, 1);
  EXPECT_EQ(d.routing->first_unexplained, 3);
  EXPECT_EQ(pointed_element(d).flat, 2);  // token 1's first id: every differing token counts
  EXPECT_TRUE(pointed_element(d).whole_row);
  d.routing->replayed = true;  // the verdict counts unexplained tokens only
  EXPECT_EQ(pointed_element(d).flat, 6);
  EXPECT_EQ(location_text(locate_pointed(nullptr, d, pointed_element(d))), "dim0 3");
}

}  // namespace
}  // namespace tdiff
