// Suite files (checks/ci_suite.h): a suite loads, hashes what defines it, and a bad file names
// the file and the line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "app/ci_suite.h"
#include "mini_suite.h"
#include "base/error.h"

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
  EXPECT_EQ(s.layers, 2);
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
}  // namespace
}  // namespace tdiff
