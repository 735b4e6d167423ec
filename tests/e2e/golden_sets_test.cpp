// The shipped golden prompt sets (cases/tiny, cases/small) cover what cases/README.md promises:
// prompt lengths beyond the window and the compression rates, repeated ids, both ends of the
// vocabulary, both padding sides, a batch of one, the default thresholds with replayed selections.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "app/ci_suite.h"
#include "casefile/case_file.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

// What the golden set promises (cases/README.md), checked on the shipped files.
void check_golden_set(const std::string& name) {
  const Suite s = load_suite(std::string(TDIFF_SOURCE_DIR) + "/cases/" + name);
  const ModelConfig c = synth_preset(s.preset);
  const PromptSet p = read_token_file(s.tokens_file, c.vocab_size);
  ASSERT_EQ(p.ids.size(), 20u) << name;
  int longer_than_window = 0, repeated = 0;
  bool first_id = false, last_id = false;
  std::set<std::size_t> lengths;
  for (const auto& ids : p.ids) {
    lengths.insert(ids.size());
    const auto n = static_cast<std::int64_t>(ids.size());
    // Longer than the window and at least two windows of each compression rate.
    longer_than_window += n > c.sliding_window && n >= 2 * c.hca_rate && n >= 2 * c.csa_rate;
    repeated += std::set<std::int64_t>(ids.begin(), ids.end()).size() * 4 <= ids.size();
    for (auto id : ids) first_id = first_id || id == 0, last_id = last_id || id == c.vocab_size - 1;
  }
  EXPECT_GE(longer_than_window, 5) << name;
  EXPECT_GE(repeated, 2) << name;
  EXPECT_TRUE(first_id && last_id) << name;
  EXPECT_GE(lengths.size(), 15u) << name;
  // Every prompt in some case; both padding sides; a batch of one without padding.
  std::set<int> used;
  std::set<std::string> sides;
  bool alone = false;
  for (const auto& k : s.cases) {
    used.insert(k.prompts.begin(), k.prompts.end());
    if (k.prompts.size() > 1) sides.insert(k.pad_side);
    alone = alone || (k.prompts.size() == 1 && k.pad_to == 0);
    EXPECT_NE(k.seed, 0u) << k.name;
  }
  EXPECT_EQ(used.size(), 20u) << name;
  EXPECT_EQ(sides.size(), 2u) << name;
  EXPECT_TRUE(alone) << name;
  EXPECT_EQ(s.repeat, 2) << name;
  // Gated by the default thresholds, with the selections replayed (cases/README.md).
  EXPECT_TRUE(s.thresholds_file.empty()) << name;
  EXPECT_TRUE(s.replay_selections) << name;
}

TEST(GoldenSet, TinyCoversWhatItPromises) { check_golden_set("tiny"); }
TEST(GoldenSet, SmallCoversWhatItPromises) { check_golden_set("small"); }
}  // namespace
}  // namespace tdiff
