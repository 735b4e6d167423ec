// Real rows (diff/real_rows.h): which positions of a padded batch are real tokens, per token
// and per compressed entry, and the tensor cut down to them.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "base/tensor.h"
#include "diff/real_rows.h"
#include "model/batch.h"

namespace tdiff {
namespace {

TEST(RealRows, TokensAndCompressedEntriesOfAPaddedBatch) {
  Tensor ids(DType::i64, {2, 4}), mask(DType::u8, {2, 4});
  const std::uint8_t m[] = {1, 1, 1, 0, 1, 1, 0, 0};
  std::copy(m, m + 8, mask.data<std::uint8_t>());
  const Batch b = Batch::make(ids, mask, 16, "test");
  const RealRows tokens = real_rows(Tensor(DType::f32, {2, 4, 3}), b, 0);
  EXPECT_EQ(tokens.real, (std::vector<bool>{true, true, true, false, true, true, false, false}));
  EXPECT_EQ(tokens.inner, (Shape{3}));
  const RealRows flat = real_rows(Tensor(DType::i64, {8, 2}), b, 0);
  EXPECT_EQ(flat.count(), 5);
  // Rate 2: row 0 has 3 real tokens (entry 0 complete, entry 1 not), row 1 has 2 (entry 0).
  const RealRows entries = real_rows(Tensor(DType::f64, {2, 2, 5}), b, 2);
  EXPECT_EQ(entries.real, (std::vector<bool>{true, false, true, false}));
  Tensor t(DType::f32, {2, 4, 3});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  const Tensor kept = keep_real_rows(t, tokens);
  EXPECT_EQ(kept.shape(), (Shape{5, 3}));
  EXPECT_EQ(kept.value(9), 12.0) << "row 3 of the kept ones is token (1, 0)";
}

}  // namespace
}  // namespace tdiff
