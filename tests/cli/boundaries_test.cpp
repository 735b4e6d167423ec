// golden --store boundaries through the binary: run and bisect on a boundaries case report
// what they report on the full case (the same CSVs), golden --verify checks what it stores, and
// a boundaries case whose model folder is gone is one line and exit 2.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_support.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::count_lines;
using testing::slurp;

// Each line of a CSV without its last field (a trace's seconds).
std::string without_last_field(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

class CliBoundaries : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    full_ = path("full/c.h5"), bnd_ = path("bnd/c.h5");
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    // The same case file name in two folders, so the reports name the same case.
    std::filesystem::create_directories(path("full"));
    std::filesystem::create_directories(path("bnd"));
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 44 --seed 5 --pad-to 48 -o '{}'",
                              path("m"), full_))
                  .code,
              0);
    std::filesystem::copy_file(full_, bnd_);
    ASSERT_EQ(run(fmt::format("golden '{}'", full_)).code, 0);
    const CliResult g = run(fmt::format("golden '{}' --store boundaries", bnd_));
    ASSERT_EQ(g.code, 0) << g.err;
    EXPECT_NE(g.err.find("store boundaries: 18 of 153 stages stored"), std::string::npos) << g.err;
  }
  std::string full_, bnd_;
};

TEST_F(CliBoundaries, RunGivesTheFullCasesReport) {
  const std::string info = run(fmt::format("info '{}'", bnd_)).out;
  EXPECT_NE(info.find("reference 18 of 153 stages stored (the layers' other stages recomputed from them when read)"),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("store boundaries"), std::string::npos) << info;
  for (const char* policy : {"fixed", "naive"}) {
    const std::string args = fmt::format("--policy {} --seed 7 --run-id r-{}", policy, policy);
    const CliResult a = run(fmt::format("run '{}' {} -o '{}'", full_, args, path("rf")));
    const CliResult b = run(fmt::format("run '{}' {} -o '{}'", bnd_, args, path("rb")));
    EXPECT_EQ(a.code, b.code) << b.err;
    EXPECT_EQ(slurp(path("rf/report.csv")), slurp(path("rb/report.csv"))) << policy;
    // Each of the 4 layers recomputed once, the measured floor's reads included.
    EXPECT_EQ(count_lines(b.err) - count_lines(a.err), 4u) << b.err;
    EXPECT_NE(b.err.find("reference: L03 recomputed from its stored boundary (42 stages"), std::string::npos) << b.err;
  }
}

TEST_F(CliBoundaries, BisectFindsTheSameCulpritBySameSteps) {
  const std::string args = "--policy fp32 --floor fp32 --set 'L01.attn.core:qk_accum=fp16' --seed 7 --run-id b1";
  const CliResult a = run(fmt::format("bisect '{}' {} -o '{}'", full_, args, path("bf")));
  const CliResult b = run(fmt::format("bisect '{}' {} -o '{}'", bnd_, args, path("bb")));
  EXPECT_EQ(a.code, 1) << a.err;
  EXPECT_EQ(b.code, 1) << b.err;
  EXPECT_NE(b.out.find("first culprit L01.attn.core"), std::string::npos) << b.out;
  EXPECT_EQ(slurp(path("bf/report.csv")), slurp(path("bb/report.csv")));
  EXPECT_EQ(without_last_field(slurp(path("bf/trace.csv"))), without_last_field(slurp(path("bb/trace.csv"))));
}

// The readers of a case's /reference beside run and bisect: a saved run compared with its case,
// an engine's dump judged against it, and the plain diff of the case and a dump.
TEST_F(CliBoundaries, CompareAndCandidateDumpsGiveTheFullCasesReport) {
  std::vector<int> plain_codes;
  for (const char* side : {"full", "bnd"}) {
    const std::string c = path(std::string(side) + "/c.h5"), saved = path(std::string(side) + "/saved.h5");
    const CliResult r =
        run(fmt::format("run '{}' --policy fixed --seed 7 --run-id s1 --no-reports --save-to '{}'", c, saved));
    ASSERT_EQ(r.code, 0) << r.err;
    const CliResult cmp = run(fmt::format("compare '{}' '{}' --group-b /runs/s1 --run-id cmp -o '{}'", c, saved,
                                          path(std::string("cmp-") + side)));
    EXPECT_EQ(cmp.code, 0) << cmp.out << cmp.err;
    const std::string dump = path(std::string(side) + "/dump.h5");
    ASSERT_EQ(WEXITSTATUS(std::system(fmt::format("'{}' '{}' fixed 7 '{}' >/dev/null", TAP_EMU_BIN, c, dump).c_str())),
              0);
    const CliResult d = run(
        fmt::format("run '{}' --candidate-dump '{}' --run-id d1 -o '{}'", c, dump, path(std::string("dump-") + side)));
    EXPECT_EQ(d.code, 0) << d.out << d.err;
    const CliResult plain =
        run(fmt::format("compare '{}' '{}' --run-id plain -o '{}'", c, dump, path(std::string("plain-") + side)));
    ASSERT_NE(plain.code, 2) << plain.err;
    plain_codes.push_back(plain.code);
  }
  EXPECT_EQ(plain_codes[0], plain_codes[1]);
  EXPECT_EQ(slurp(path("cmp-full/report.csv")), slurp(path("cmp-bnd/report.csv")));
  EXPECT_EQ(slurp(path("dump-full/report.csv")), slurp(path("dump-bnd/report.csv")));
  EXPECT_EQ(slurp(path("plain-full/report.csv")), slurp(path("plain-bnd/report.csv")));
  EXPECT_GT(count_lines(slurp(path("dump-bnd/report.csv"))), 150u);
  EXPECT_GT(count_lines(slurp(path("plain-bnd/report.csv"))), 150u);
}

// An engine tdiff runs itself takes the stages put on the reference from the case through the
// tap (tdiff_tap_reference): on a boundaries case, recomputed ones.
TEST_F(CliBoundaries, BisectOfAnEngineTakesRecomputedStages) {
  std::ofstream(path("fault.toml")) << "preset = \"fp32\"\n[[override]]\nstages = \"L02.attn.core\"\n"
                                       "softmax_stats = \"fp16\"\n";
  const std::string engine = fmt::format("--candidate-cmd \"'{}' --request '{}'\"", TAP_EMU_BIN, path("fault.toml"));
  for (const char* side : {"full", "bnd"}) {
    const CliResult r = run(fmt::format("bisect '{}' {} --policy fp32 --floor fp32 --seed 7 --run-id e1 -o '{}'",
                                        path(std::string(side) + "/c.h5"), engine, path(std::string("eng-") + side)));
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("first culprit L02.attn.core"), std::string::npos) << r.out;
  }
  EXPECT_EQ(slurp(path("eng-full/report.csv")), slurp(path("eng-bnd/report.csv")));
  EXPECT_EQ(without_last_field(slurp(path("eng-full/trace.csv"))),
            without_last_field(slurp(path("eng-bnd/trace.csv"))));
}

TEST_F(CliBoundaries, VerifyChecksTheStoredStages) {
  const CliResult v = run(fmt::format("golden '{}' --verify", bnd_));
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.err.find("21 tensors of 153 stages recomputed on the stored inputs"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("21 bit-identical, 0 beyond the tolerance"), std::string::npos) << v.err;
}

TEST_F(CliBoundaries, AMissingModelFolderIsOneLine) {
  std::filesystem::rename(path("m"), path("gone"));
  for (const char* command : {"run", "bisect"}) {
    const CliResult r = run(fmt::format("{} '{}' --policy fixed", command, bnd_));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.err,
              fmt::format("tdiff: error: {}: model folder '{}' does not exist (pass --model DIR)\n", bnd_, path("m")));
  }
  // Pointed at the moved folder, the layers are recomputed from it.
  EXPECT_EQ(run(fmt::format("run '{}' --policy fixed --no-reports --model '{}'", bnd_, path("gone"))).code, 0);
}

}  // namespace
}  // namespace tdiff
