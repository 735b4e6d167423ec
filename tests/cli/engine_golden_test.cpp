// An engine of one's own on the shipped golden set: tdiff's emu through the tap
// (examples/04_candidate_dump/tap_emu.cpp) under `fixed` is a correct bf16 port, so every
// case of cases/tiny passes, free-running (judged against the reference that follows its
// choices, exec/followed_reference.h) and replayed (the reference's choices handed on).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "cli_support.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;

class EngineGolden : public testing::CliTest {};

TEST_F(EngineGolden, TapEmuUnderFixedPassesTheTinySetFreeAndReplayed) {
  const std::string set = std::string(TDIFF_SOURCE_DIR) + "/cases/tiny", cache = path("cache");
  const CliResult prep = run(fmt::format("ci '{}' --cache '{}' --prepare", set, cache));
  ASSERT_EQ(prep.code, 0) << prep.err;
  std::map<std::string, std::string> case_of;
  std::stringstream lines(prep.out);
  for (std::string name, file, model; lines >> name >> file >> model;) case_of[name] = file;
  ASSERT_GE(case_of.size(), 7u) << prep.out;
  // Replayed: the engine's dumps written by hand, as a user's loop over --prepare's lines does.
  const std::string dumps = path("dumps-replay");
  fs::create_directories(dumps);
  for (const auto& [name, file] : case_of) {
    const int status =
        std::system(fmt::format("'{}' '{}' fixed 7 '{}/{}.h5' replay >/dev/null", TAP_EMU_BIN, file, dumps, name).c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name;
  }
  const std::string all_pass = fmt::format("verdict PASS: {} PASS, 0 WARN, 0 FAIL", case_of.size());
  const CliResult replayed = run(
      fmt::format("ci '{}' --cache '{}' --candidate-dumps '{}' --dump-policy fixed -o '{}'", set, cache, dumps, path("rep-replay")));
  EXPECT_EQ(replayed.code, 0) << replayed.out << replayed.err;
  EXPECT_NE(replayed.out.find(all_pass), std::string::npos) << replayed.out;
  // Free-running: tdiff runs the engine on every case itself (--candidate-cmd).
  const CliResult free = run(fmt::format("ci '{}' --cache '{}' --candidate-cmd \"'{}' --request fixed\" --dump-policy fixed -o '{}'",
                                         set, cache, TAP_EMU_BIN, path("rep-free")));
  EXPECT_EQ(free.code, 0) << free.out << free.err;
  EXPECT_NE(free.out.find(all_pass), std::string::npos) << free.out;
}

}  // namespace
}  // namespace tdiff
