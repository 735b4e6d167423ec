// The shipped golden prompt sets (cases/tiny, cases/small) cover what cases/README.md promises:
// prompt lengths beyond the window and the compression rates, repeated ids, both ends of the
// vocabulary, both padding sides, a batch of one, the default thresholds with replayed selections,
// and cases on a trained checkpoint's statistics and on massive activations, where the fixed
// policy passes and the naive one is caught on the logits themselves.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include "app/ci_suite.h"
#include "casefile/case_file.h"
#include "cli_support.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

// What the golden set promises (cases/README.md), checked on the shipped files.
void check_golden_set(const std::string& name) {
  const Suite s = load_suite(std::string(TDIFF_SOURCE_DIR) + "/cases/" + name);
  const ModelConfig c = s.models[0].config();
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
    if (k.model != 0) continue;  // the cases on the [models.NAME] variants: check_realistic_cases
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

// The cases on realistic statistics (cases/README.md, "Models"): some on the trained profile and
// some on --outliers, each a variant of the set's own model, and every prompt of an outlier case
// (and some prompt of each trained case) holds a token id that carries massive activations, so
// the case exercises them. Returns the names of those cases.
std::vector<std::string> check_realistic_cases(const std::string& name, std::size_t most) {
  const Suite s = load_suite(std::string(TDIFF_SOURCE_DIR) + "/cases/" + name);
  const PromptSet p = read_token_file(s.tokens_file, s.models[0].config().vocab_size);
  std::vector<std::string> names;
  int trained = 0, outliers = 0;
  for (const auto& k : s.cases) {
    const SuiteModel& m = s.model_of(k);
    if (k.model == 0) {
      EXPECT_EQ(m.profile, SynthProfile::standard) << k.name;
      continue;
    }
    names.push_back(k.name);
    EXPECT_EQ(m.preset, s.models[0].preset) << k.name;
    EXPECT_EQ(m.seed, s.models[0].seed) << k.name;
    trained += m.profile == SynthProfile::trained;
    outliers += m.outliers;
    const SynthOutliers massive = synth_embedding_outliers(m.config(), m.seed, m.synth_options());
    const std::set<std::int64_t> ids(massive.token_ids.begin(), massive.token_ids.end());
    int holding = 0;
    for (int n : k.prompts) {
      const auto& prompt = p.ids[static_cast<std::size_t>(n - 1)];
      const bool holds = std::any_of(prompt.begin(), prompt.end(), [&](std::int64_t id) { return ids.count(id) > 0; });
      holding += holds;
      if (m.outliers) {
        EXPECT_TRUE(holds) << k.name << ": prompt " << n << " holds none of the outlier ids";
      }
    }
    EXPECT_GE(holding, 1) << k.name;
  }
  EXPECT_GE(trained, 2) << name;
  EXPECT_GE(outliers, 1) << name;
  EXPECT_LE(names.size(), most) << name << ": keep the set's time small";
  return names;
}

// The generation cases (cases/README.md, "Generation"): prompts of every length mod the CSA
// rate, one a multiple of the HCA rate, chunked prefills with an odd chunk, and decode spans
// that each cross a CSA and an HCA boundary and the window's wrap (a multiple of W).
void check_generation_cases(const std::string& name) {
  const Suite s = load_suite(std::string(TDIFF_SOURCE_DIR) + "/cases/" + name);
  const ModelConfig c = s.models[0].config();
  const PromptSet p = read_token_file(s.tokens_file, c.vocab_size);
  std::set<std::int64_t> residues;
  bool hca_multiple = false, odd_chunk = false;
  auto crosses = [](std::int64_t from, std::int64_t to, std::int64_t every) { return to / every > from / every; };
  for (const auto& k : s.cases) {
    if (k.decode == 0) continue;
    const auto seq = static_cast<std::int64_t>(p.ids[static_cast<std::size_t>(k.prompts[0] - 1)].size());
    const std::int64_t prompt = seq - k.decode;
    residues.insert(prompt % c.csa_rate);
    hca_multiple = hca_multiple || prompt % c.hca_rate == 0;
    for (auto n : k.prefill_chunks) odd_chunk = odd_chunk || n % 2 == 1;
    // decode steps feed positions prompt .. seq-1
    EXPECT_TRUE(crosses(prompt - 1, seq - 1, c.csa_rate)) << k.name;
    EXPECT_TRUE(crosses(prompt - 1, seq - 1, c.hca_rate)) << k.name;
    EXPECT_TRUE(crosses(prompt - 1, seq - 1, c.sliding_window)) << k.name;
  }
  EXPECT_EQ(residues, (std::set<std::int64_t>{0, 1, 2, 3})) << name;
  EXPECT_TRUE(hca_multiple) << name;
  EXPECT_TRUE(odd_chunk) << name;
}

TEST(GoldenSet, TinyCoversWhatItPromises) {
  check_golden_set("tiny");
  check_realistic_cases("tiny", 4);
  check_generation_cases("tiny");
}
TEST(GoldenSet, SmallCoversWhatItPromises) {
  check_golden_set("small");
  check_realistic_cases("small", 6);
}

// The promise of the realistic cases of the tiny set (what CI runs), through the binary: fixed
// passes each one (exit 0); naive FAILs each one, and there not only on its fp16 RoPE tables and
// its nondeterminism (which is all that catches it on the default model, whose logits it
// matches): its logits FAIL.
class GoldenSetRuns : public testing::CliTest {};
TEST_F(GoldenSetRuns, TinyRealisticCasesPassFixedAndCatchNaiveOnTheLogits) {
  const std::vector<std::string> cases = check_realistic_cases("tiny", 4);
  const std::string set = std::string(TDIFF_SOURCE_DIR) + "/cases/tiny";
  const std::string args = fmt::format("ci '{}' --cache '{}' --cases '{}'", set, path("cache"), fmt::join(cases, ","));
  const auto fixed = run(args + " --policy fixed -o " + path("fixed"));
  ASSERT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  const auto naive = run(args + " --policy naive -o " + path("naive"));
  ASSERT_EQ(naive.code, 1) << naive.out << naive.err;
  for (const auto& k : cases) {
    const std::string junit = testing::slurp(path("naive/junit.xml"));
    const auto at = junit.find(fmt::format("name=\"{}\"", k));
    ASSERT_NE(at, std::string::npos) << k;
    EXPECT_NE(junit.substr(at, junit.find("</testcase>", at) - at).find("<failure"), std::string::npos) << k;
    auto logits_verdict = [&](const std::string& run) {
      std::stringstream csv(testing::slurp(path(run + "/" + k + "/report.csv")));
      auto cells = [](const std::string& line) {
        std::vector<std::string> out;
        std::stringstream in(line);
        for (std::string cell; std::getline(in, cell, ',');) out.push_back(cell);
        return out;
      };
      std::string line;
      std::getline(csv, line);
      const auto header = cells(line);
      const auto column = static_cast<std::size_t>(std::find(header.begin(), header.end(), "verdict") - header.begin());
      while (std::getline(csv, line))
        if (line.rfind("lm_head,logits,", 0) == 0 && cells(line).size() > column) return cells(line)[column];
      return std::string("none");
    };
    EXPECT_EQ(logits_verdict("naive"), "FAIL") << k;
    EXPECT_NE(logits_verdict("fixed"), "FAIL") << k;
  }
}
}  // namespace
}  // namespace tdiff
