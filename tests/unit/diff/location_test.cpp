// Where an element sits in the model's terms (diff/location.h), from its stage's layout.
#include <gtest/gtest.h>

#include "diff/location.h"

namespace tdiff {
namespace {

TEST(DiffLocation, PerTokenHeadsAndChannels) {
  // q [B=2, S=48, H=4, d=32]: flat = ((1 * 48 + 23) * 4 + 2) * 32 + 17.
  const std::int64_t flat = ((1 * 48 + 23) * 4 + 2) * 32 + 17;
  EXPECT_EQ(location_text("L03.attn.q_rope", {2, 48, 4, 32}, flat, 48), "row 1, token 23, head 2, ch 17");
  // The hyper-connection streams [B, S, n_hc, D].
  EXPECT_EQ(location_text("L00.hc_attn.post", {2, 48, 4, 64}, ((0 * 48 + 5) * 4 + 3) * 64 + 9, 48),
            "row 0, token 5, stream 3, ch 9");
  EXPECT_EQ(location_text("L00.attn_norm", {2, 48, 64}, (1 * 48 + 40) * 64 + 63, 48), "row 1, token 40, ch 63");
}

TEST(DiffLocation, FlattenedTokensSplitIntoRowAndToken) {
  // The router's logits [B*S, E] with S = 48: token 60 is row 1, token 12.
  EXPECT_EQ(location_text("L01.moe.router", {96, 8}, 60 * 8 + 5, 48), "row 1, token 12, expert 5");
  EXPECT_EQ(location_text("L01.moe.router", {96, 8}, 60 * 8 + 5, 0), "token 60, expert 5");  // S unknown
  EXPECT_EQ(location_text("L01.moe.experts", {96, 64}, 95 * 64, 48), "row 1, token 47, ch 0");
}

TEST(DiffLocation, EntriesQueriesAndUnknownNames) {
  EXPECT_EQ(location_text("L01.attn.idx.score", {2, 48, 12}, (1 * 48 + 47) * 12 + 5, 48), "row 1, query 47, entry 5");
  EXPECT_EQ(location_text("L01.attn.cmp.pool", {2, 12, 32}, (1 * 12 + 3) * 32 + 8, 48), "row 1, entry 3, ch 8");
  // A key no stage name makes, or a rank its layout does not have: plain dimensions.
  EXPECT_EQ(location_text("logits", {2, 3}, 4, 0), "dim0 1, dim1 1");
  EXPECT_EQ(location_text("L01.attn.idx.score", {6, 2}, 3, 0), "dim0 1, dim1 1");
  EXPECT_EQ(location_text("L01.attn.q_rope", {2, 3}, 6, 0), "");  // outside the tensor
  EXPECT_EQ(location_text("L01.attn.q_rope", {2, 3}, -1, 0), "");
}

}  // namespace
}  // namespace tdiff
