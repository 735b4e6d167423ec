// Stage patterns (src/model/pattern.h): every glob of a --stages list must match a stage, so a
// typo cannot narrow a run without a word (issue 39, item 3, defect d).
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "model/pattern.h"
#include "model/stage_graph.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

TEST(Pattern, EveryGlobOfAListMustMatchAStage) {
  const auto stages = build_stages(synth_preset("tiny"));
  EXPECT_EQ(select_stages("lm_head", stages), std::vector<std::string>{"lm_head"});
  EXPECT_EQ(select_stages("lm_head,,", stages), std::vector<std::string>{"lm_head"});  // empty globs add nothing
  EXPECT_GT(select_stages("L00.attn.*,lm_head", stages).size(), 2u);
  for (const auto& [pattern, glob] : std::vector<std::pair<std::string, std::string>>{
           {"L00.attn.*,L99.*", "L99.*"}, {"L9*,lm_head", "L9*"}, {"lm_hed", "lm_hed"}}) {
    try {
      select_stages(pattern, stages);
      ADD_FAILURE() << pattern << " accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "--stages '" + pattern + "': '" + glob +
                                           "' matches no stage of this model (`tdiff info CASE --stages` lists them)");
    }
  }
  EXPECT_THROW(select_stages(",", stages), InputError);
}

}  // namespace
}  // namespace tdiff
