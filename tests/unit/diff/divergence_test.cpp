// Tokens that followed their own selection (diff/divergence.h): marked at the selection where
// their id set differs (order aside, real tokens only), left out of later stages' rows (per
// token and per compressed entry), never out of the selection's own or earlier ones; and the
// locations of what is left still name the padded batch's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "diff/divergence.h"
#include "diff/location.h"
#include "model/tensor_contract.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

constexpr std::int64_t kSeq = 16;

// Row 0: 12 real tokens and 4 of right padding; row 1: 16 real.
Batch padded_batch(std::int64_t vocab) {
  Tensor ids(DType::i64, {2, kSeq}), mask(DType::u8, {2, kSeq});
  for (std::int64_t i = 0; i < 2 * kSeq; ++i) {
    ids.data<std::int64_t>()[i] = i % vocab;
    mask.data<std::uint8_t>()[i] = i >= kSeq || i < 12;
  }
  return Batch::make(ids, mask, vocab, "test");
}

const Stage& stage_named(const std::vector<Stage>& stages, const std::string& name) {
  return *std::find_if(stages.begin(), stages.end(), [&](const Stage& s) { return s.name == name; });
}

class Divergence : public ::testing::Test {
 protected:
  ModelConfig config = synth_preset("tiny");
  std::vector<Stage> stages = build_stages(config);
  Batch batch = padded_batch(config.vocab_size);
  TensorContract contract{stages, config, 2, kSeq};

  Tensor ids(const std::string& key) const {
    Tensor t(DType::i64, contract.find(key)->shape());
    const std::int64_t k = t.dim(-1);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int64_t>()[i] = i % k;
    return t;
  }
};

TEST_F(Divergence, ATokenThatChoseOtherwiseIsLeftOutOfLaterStagesOnly) {
  const Stage& select = stage_named(stages, "L01.moe.select");
  const Tensor ref = ids("L01.moe.select/idx");
  Tensor cand = ref.clone();
  const std::int64_t k = ref.dim(-1);
  std::reverse(cand.data<std::int64_t>() + 3 * k, cand.data<std::int64_t>() + 4 * k);  // token 3: order only
  cand.data<std::int64_t>()[5 * k] = 99;                                               // token 5: another expert
  cand.data<std::int64_t>()[14 * k] = 99;                                              // token 14: padding
  cand.data<std::int64_t>()[(kSeq + 2) * k] = 99;                                      // row 1, token 2
  DivergedTokens d(stages, config, batch);
  EXPECT_EQ(d.mark(select, ref, cand), 2);
  EXPECT_EQ(d.tokens(), 2);
  EXPECT_EQ(d.first_stage(), "L01.moe.select");
  EXPECT_EQ(d.mark(select, ref, cand), 0) << "marked once";

  // The selection's own rows and an earlier stage's stay; the experts after it lose two rows.
  const Shape hidden = contract.find("L01.moe.experts/routed")->shape();
  const std::vector<bool> own = d.diverged_rows("L01.moe.select", hidden);
  EXPECT_TRUE(std::none_of(own.begin(), own.end(), [](bool b) { return b; }));
  RealRows rows = d.layout("L01.moe.experts", hidden);
  EXPECT_EQ(d.exclude("L01.moe.experts", hidden, rows), 2);
  EXPECT_FALSE(rows.real[5]);
  EXPECT_FALSE(rows.real[kSeq + 2]);
  EXPECT_TRUE(rows.real[3]);
}

TEST_F(Divergence, ACompressedEntryIsLeftOutWhenOneOfItsTokensDiverged) {
  const std::string pool = [&] {
    for (const auto& s : stages)
      if (s.name.ends_with(".attn.cmp.pool") && config.rate(s.layer_type) > 0 && s.layer > 1) return s.name;
    return std::string();
  }();
  ASSERT_FALSE(pool.empty());
  const Stage& select = stage_named(stages, "L01.moe.select");
  const Tensor ref = ids("L01.moe.select/idx");
  Tensor cand = ref.clone();
  cand.data<std::int64_t>()[(kSeq + 2) * ref.dim(-1)] = 99;  // row 1, token 2
  DivergedTokens d(stages, config, batch);
  d.mark(select, ref, cand);
  const Shape entries = contract.find(pool + "/out")->shape();
  const std::int64_t rate = config.rate(stage_named(stages, pool).layer_type);
  const std::vector<bool> gone = d.diverged_rows(pool, entries);
  ASSERT_EQ(gone.size(), static_cast<std::size_t>(entries[0] * entries[1]));
  for (std::int64_t r = 0; r < entries[0] * entries[1]; ++r)
    EXPECT_EQ(gone[static_cast<std::size_t>(r)], r == entries[1] + 2 / rate) << "entry row " << r;
}

TEST_F(Divergence, LocationsOfTheRowsLeftNameThePaddedBatchsTokens) {
  const Stage& select = stage_named(stages, "L01.moe.select");
  const Tensor ref = ids("L01.moe.select/idx");
  Tensor cand = ref.clone();
  cand.data<std::int64_t>()[0] = 99;  // row 0, token 0
  auto d = std::make_shared<DivergedTokens>(stages, config, batch);
  d->mark(select, ref, cand);
  const Locator locator(stages, config, batch, d);
  const TensorSpec* spec = contract.find("L02.attn.core/o");
  // Judged on all rows less token 0 (a backend's free run): compared row 0 is token 1.
  Shape kept = spec->shape();
  kept.erase(kept.begin());
  kept[0] = 2 * kSeq - 1;
  const std::int64_t inner = shape_numel(kept) / kept[0];
  EXPECT_EQ(location_text(locator.locate("L02.attn.core/o", kept, 5)), "row 0, token 1, head 0, ch 5");
  // Judged on the real rows less token 0 (a dump's): compared row 11 is row 1's token 0.
  kept[0] = 12 + kSeq - 1;
  EXPECT_EQ(location_text(locator.locate("L02.attn.core/o", kept, 11 * inner)), "row 1, token 0, head 0, ch 0");
}

}  // namespace
}  // namespace tdiff
