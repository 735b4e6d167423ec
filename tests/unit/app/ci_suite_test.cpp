// Suite files (checks/ci_suite.h): a suite loads, hashes what defines it, and a bad file names
// the file and the line.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "app/ci_suite.h"
#include "mini_suite.h"
#include "base/error.h"
#include "synth/synth_options.h"

namespace tdiff {
namespace {

using Suites = testing::MiniSuite;

TEST_F(Suites, LoadsAndHashesTheDefinitions) {
  write_suite();
  const Suite s = load_suite(dir_.string());
  EXPECT_EQ(s.name, "mini");
  ASSERT_EQ(s.cases.size(), 2u);
  EXPECT_EQ(s.cases[1].pad_side, "left");
  EXPECT_EQ(s.cases[0].pad_to, 34);
  ASSERT_EQ(s.models.size(), 1u);
  EXPECT_EQ(s.models[0].layers, 2);
  EXPECT_EQ(s.models[0].folder, "model");
  EXPECT_EQ(s.models[0].profile, SynthProfile::standard);
  EXPECT_TRUE(s.replay_selections);  // the default, as tdiff run's
  EXPECT_FALSE(load_suite(suite_with("repeat = 2", "repeat = 2\nselections = \"free\"")).replay_selections);
  EXPECT_EQ(s.hash.size(), 64u);
  EXPECT_EQ(load_suite(path("suite.toml")).hash, s.hash);
  std::ofstream(path("p.txt"), std::ios::app) << "4 5 6\n";  // another token file: another key
  EXPECT_NE(load_suite(dir_.string()).hash, s.hash);
}

TEST_F(Suites, BadSuiteFilesNameTheFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"repeat = 2", "repeat = 2\nbogus = 1"},           {"prompts = [1, 2]", "prompts = [1, 9]"},
      {"repeat = 2", "repeat = 2\nselections = \"some\""},
      {"pad_to = 34", "pad_to = 10"},                    {"name = \"left\"", "name = \"right\""},
      {"preset = \"tiny\"", "preset = \"huge\""},        {"pad_side = \"left\"", "pad_side = \"up\""},
      {"tokens = \"p.txt\"", "tokens = \"none.txt\""},   {"seed = 6", "seed = \"six\""},
      {"[[case]]\nname = \"right\"", "[[case]]\nname = \"Right Case\""},
      {"repeat = 2", "repeat = 1000000"},                {"pad_to = 34", "pad_to = 1000000000000"},
  };
  for (const auto& [from, to] : bad) {
    const std::string f = suite_with(from, to);
    try {
      load_suite(f);
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("bad.toml") != std::string::npos || what.find("none.txt") != std::string::npos ||
                  what.find("preset") != std::string::npos)
          << what;
    }
  }
  EXPECT_THROW(load_suite(path("nowhere")), InputError);
}

// A generation case carries its schedule; one its rows cannot run names the suite's line.
TEST_F(Suites, GenerationCasesCarryTheirScheduleAndBadOnesNameTheLine) {
  const std::string gen = "[[case]]\nname = \"gen\"\nprompts = [2]\nseed = 7\ndecode = 8\nprefill_chunks = [3, 5, 15]\n";
  write_suite(gen);
  const Suite s = load_suite(dir_.string());
  ASSERT_EQ(s.cases.size(), 3u);
  EXPECT_EQ(s.cases[2].decode, 8);
  EXPECT_EQ(s.cases[2].prefill_chunks, (std::vector<std::int64_t>{3, 5, 15}));
  EXPECT_EQ(s.cases[0].decode, 0);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"pad_to = 34\nseed = 5", "pad_to = 34\nseed = 5\ndecode = 4"},  // padded rows
           {"seed = 6", "seed = 6\ndecode = 2"},                              // rows of 31, 32, 25 tokens
           {"pad_to = 34\nseed = 5", "pad_to = 34\nseed = 5\nprefill_chunks = [0]"},
           {"pad_to = 34\nseed = 5", "pad_to = 34\nseed = 5\nprefill_chunks = \"5,3\""},
           {"pad_to = 34\nseed = 5", "pad_to = 34\nseed = 5\ndecode = -1"}}) {
    try {
      load_suite(suite_with(from, to));
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.toml"), std::string::npos) << e.what();
    }
  }
  for (const std::string& bad : {std::string("decode = 8\nprefill_chunks = [3, 5]"), std::string("decode = 31")}) {
    std::string text = gen;
    text.replace(text.find("decode = 8\nprefill_chunks = [3, 5, 15]"), 38, bad);
    write_suite(text);
    try {
      load_suite(dir_.string());
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("suite.toml"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("case 'gen'"), std::string::npos) << e.what();
    }
  }
}

// [models.NAME] tables are variants of [model] (the keys they leave out are [model]'s); a case
// names one with `model`; each distinct definition has one folder in the cache.
TEST_F(Suites, NamedModelsInheritAndShareFolders) {
  const std::string models =
      "[models.trained]\nprofile = \"trained\"\n[models.spiky]\noutliers = true\nseed = 3\n"
      "[models.same]\nseed = 1\n[models.unused]\nprofile = \"trained\"\n[[case]]";
  std::string f = suite_with("[[case]]", models);
  std::string text = testing::slurp(f);
  text +=
      "[[case]]\nname = \"t\"\nmodel = \"trained\"\nprompts = [1]\nseed = 8\n"
      "[[case]]\nname = \"o\"\nmodel = \"spiky\"\nprompts = [2]\nseed = 9\n"
      "[[case]]\nname = \"s\"\nmodel = \"same\"\nprompts = [2]\nseed = 10\n";
  std::ofstream(f) << text;
  const Suite s = load_suite(f);
  ASSERT_EQ(s.models.size(), 5u);
  ASSERT_EQ(s.cases.size(), 5u);
  EXPECT_EQ(s.model_of(s.cases[0]).folder, "model");
  const SuiteModel& t = s.model_of(s.cases[2]);
  EXPECT_EQ(t.name, "trained");
  EXPECT_EQ(t.profile, SynthProfile::trained);
  EXPECT_EQ(t.layers, 2);  // inherited
  EXPECT_EQ(t.seed, 1u);
  EXPECT_EQ(t.folder, "model-trained");
  EXPECT_EQ(t.describe(), "preset tiny seed 1, 2 layers, trained profile");
  const SuiteModel& o = s.model_of(s.cases[3]);
  EXPECT_TRUE(o.outliers);
  EXPECT_EQ(o.seed, 3u);
  EXPECT_EQ(o.profile, SynthProfile::standard);
  EXPECT_EQ(o.folder, "model-spiky");
  // Defined exactly as [model]: the same folder, built once. The unused twin of `trained` shares its folder.
  EXPECT_EQ(s.model_of(s.cases[4]).folder, "model");
  for (const auto& m : s.models)
    if (m.name == "unused") {
      EXPECT_EQ(m.folder, "model-trained");
    }
  // The cache key covers the models: another profile is another key.
  std::ofstream(f) << std::string(text).replace(text.find("profile = \"trained\""), 19, "profile = \"default\"");
  EXPECT_NE(load_suite(f).hash, s.hash);
}

// A bad model definition or a case naming no model: the file and the line of the culprit.
TEST_F(Suites, BadModelsNameTheFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"layers = 2", "layers = 2\nprofil = \"trained\""},  // unknown key in [model]
      {"layers = 2", "layers = 2\nprofile = \"sharp\""},   // unknown profile
      {"layers = 2", "layers = 2\noutliers = 1"},          // not a boolean
      {"layers = 2", "layers = 2\nlayers_ = 1"},
      {"layers = 2", "layers = 9"},  // more than the preset has
      {"preset = \"tiny\"", "preset = \"huge\""},
      {"layers = 2", "layers = 2\nprofile = \"trained\"\noutliers = true"},
      {"[[case]]\nname = \"right\"", "[models.t]\nprofile = \"trained\"\nbogus = 1\n[[case]]\nname = \"right\""},
      {"[[case]]\nname = \"right\"", "[models.t]\nprofile = \"trianed\"\n[[case]]\nname = \"right\""},
      {"[[case]]\nname = \"right\"", "[models.T]\nseed = 2\n[[case]]\nname = \"right\""},
      {"[[case]]\nname = \"right\"", "[models.t]\noutliers = true\nprofile = \"trained\"\n[[case]]\nname = \"right\""},
      {"[[case]]\nname = \"right\"", "[models]\nt = 1\n[[case]]\nname = \"right\""},
      {"seed = 5", "seed = 5\nmodel = \"trained\""},  // no such [models.NAME]
      {"seed = 5", "seed = 5\nmodel = 1"},
  };
  for (const auto& [from, to] : bad) {
    const std::string f = suite_with(from, to);
    try {
      load_suite(f);
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("bad.toml:"), std::string::npos) << to << ": " << what;
      EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(what[what.find("bad.toml:") + 9]))) << "no line: " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}
}  // namespace
}  // namespace tdiff
