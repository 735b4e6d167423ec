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
  for (const char* mode : {"run", "replay"}) {
    const std::string dumps = path(std::string("dumps-") + mode);
    fs::create_directories(dumps);
    for (const auto& [name, file] : case_of) {
      const int status = std::system(
          fmt::format("'{}' '{}' fixed 7 '{}/{}.h5' {} >/dev/null", TAP_EMU_BIN, file, dumps, name, mode).c_str());
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name << " " << mode;
    }
    const CliResult ci = run(fmt::format("ci '{}' --cache '{}' --candidate-dumps '{}' --dump-policy fixed -o '{}'", set,
                                         cache, dumps, path(std::string("rep-") + mode)));
    EXPECT_EQ(ci.code, 0) << mode << "\n" << ci.out << ci.err;
    EXPECT_NE(ci.out.find(fmt::format("verdict PASS: {} PASS, 0 WARN, 0 FAIL", case_of.size())), std::string::npos)
        << mode << "\n" << ci.out;
  }
}

}  // namespace
}  // namespace tdiff
