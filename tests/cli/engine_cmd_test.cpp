// An engine tdiff runs itself (`--candidate-cmd`, exec/engine_backend.h): tdiff's emu through the
// tap (examples/04_candidate_dump/tap_emu.cpp --request) with a fault planted is named by bisect
// exactly as `bisect --backend emu` names it, determinism runs it run after run, run judges its
// dump, and an engine that fails is one line, exit 2.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "cli_support.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::slurp;

class EngineCmd : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 4 --len 96 --seed 3 -o '{}'", path("m"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
    std::ofstream(path("fault.toml")) << "preset = \"fp32\"\n[[override]]\nstages = \"L02.attn.core\"\nsoftmax_stats = \"fp16\"\n";
    std::ofstream(path("unstable.toml")) << "preset = \"fixed\"\n[[override]]\nstages = \"*\"\ntopk_ties = \"unstable\"\n";
  }
  std::string c() const { return fmt::format("'{}'", path("c.h5")); }
  std::string engine(const std::string& policy) const {
    return fmt::format("--candidate-cmd \"'{}' --request '{}'\"", TAP_EMU_BIN, path(policy));
  }
  static std::string line_of(const std::string& out, const std::string& head) {
    const auto at = out.find("\n" + head);
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  }
};

TEST_F(EngineCmd, BisectNamesAnEnginesFaultAsItNamesTheBackends) {
  const CliResult emu = run(fmt::format("bisect {} --policy '{}' --floor fp32 --no-reports", c(), path("fault.toml")));
  const CliResult eng = run(fmt::format("bisect {} {} --policy fp32 --floor fp32 -o '{}'", c(), engine("fault.toml"),
                                        path("bis")));
  ASSERT_EQ(emu.code, 1) << emu.out << emu.err;
  ASSERT_EQ(eng.code, 1) << eng.out << eng.err;
  const std::string culprit = line_of(emu.out, "result    ");
  EXPECT_NE(culprit.find("first culprit L02.attn.core"), std::string::npos) << emu.out;
  EXPECT_EQ(line_of(eng.out, "result    "), culprit) << eng.out;
  EXPECT_NE(eng.out.find("--candidate-cmd"), std::string::npos) << "the reproduce line runs the engine: " << eng.out;
  // The environment record names the engine, not the backend the floor runs on.
  const std::string record = slurp(path("bis/bisect.json"));
  EXPECT_NE(record.find("\"backend\": \"engine\""), std::string::npos) << record.substr(0, 2000);
  EXPECT_NE(record.find("\"engine.engine\": \"tdiff emu via examples/tap/tap_emu.cpp\""), std::string::npos);
}

TEST_F(EngineCmd, DeterminismRunsTheEngineRunAfterRun) {
  const CliResult same = run(fmt::format("determinism {} {} --runs 2 --no-reports", c(), engine("unstable.toml")));
  EXPECT_EQ(same.code, 1) << same.out << same.err;  // unstable tie order: the run seeds differ
  EXPECT_NE(same.out.find("NONDETERMINISTIC"), std::string::npos) << same.out;
  std::ofstream(path("fixed.toml")) << "preset = \"fixed\"\n";
  const CliResult fixed = run(fmt::format("determinism {} {} --runs 2 --no-reports", c(), engine("fixed.toml")));
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("DETERMINISTIC: all 153 stages bit-identical in 2 runs"), std::string::npos) << fixed.out;
  const CliResult sweep = run(fmt::format("determinism {} {} --batch-sweep 1,2 --no-reports", c(), engine("fixed.toml")));
  EXPECT_EQ(sweep.code, 2) << sweep.out << sweep.err;
}

TEST_F(EngineCmd, RunJudgesTheEnginesDumpAndAFailingEngineIsOneLine) {
  const CliResult r = run(fmt::format("run {} {} --dump-policy fp32 --no-record -o '{}'", c(), engine("fault.toml"), path("rep")));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("first FAIL  L02.attn.core/o"), std::string::npos) << r.out;
  EXPECT_NE(slurp(path("rep/report.html")).find("--candidate-cmd"), std::string::npos);
  for (const auto& [cmd, says] : {std::pair<std::string, std::string>{"echo broken >&2; exit 3", "the engine exited 3 (broken)"},
                                  {"true", "the engine wrote no dump"}}) {
    const CliResult bad = run(fmt::format("run {} --candidate-cmd '{}' --no-record --no-reports", c(), cmd));
    EXPECT_EQ(bad.code, 2) << cmd << "\n" << bad.out << bad.err;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

TEST_F(EngineCmd, RunAsksTheEngineForTheReplayedModeWhenToldTo) {
  // --selections replay with --candidate-cmd: the request's mode is replay, and the engine's dump
  // is judged as the same engine's replayed dump given by hand.
  std::ofstream(path("fixed.toml")) << "preset = \"fixed\"\n";
  const CliResult asked = run(fmt::format("run {} {} --selections replay --dump-policy fixed --no-record -o '{}'", c(),
                                          engine("fixed.toml"), path("asked")));
  ASSERT_EQ(asked.code, 0) << asked.out << asked.err;
  const int tapped = std::system(
      fmt::format("'{}' {} '{}' 0 '{}' replay >/dev/null", TAP_EMU_BIN, c(), path("fixed.toml"), path("replay.h5")).c_str());
  ASSERT_EQ(WEXITSTATUS(tapped), 0);
  const CliResult given = run(fmt::format("run {} --candidate-dump '{}' --dump-policy fixed --no-record -o '{}'", c(),
                                          path("replay.h5"), path("given")));
  ASSERT_EQ(given.code, 0) << given.out << given.err;
  EXPECT_EQ(slurp(path("asked/report.csv")), slurp(path("given/report.csv")));
  EXPECT_EQ(asked.out.find("followed the dump's choices"), std::string::npos) << "a replayed dump: " << asked.out;
}

}  // namespace
}  // namespace tdiff
