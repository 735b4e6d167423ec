// Splits across devices through the binary (--tp, --ep, --allreduce, --moe-reduce, determinism
// --tp-sweep): emu's split passes with the expected errors, the split is named in the reports
// and the record, bad sizes are one line and exit 2, and the sweep's vacuity check fails on 2
// ranks and passes at 4.
#include <fstream>
#include <sstream>

#include "cli_support.h"
#include "history_support.h"

namespace tdiff {
namespace {

class TpSplitCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 4 -o '{}'", path("m"))).code, 0);
    std::ofstream(path("p.txt")) << "1 2 3 4 5 6 7 8 9 10 11\n200 100 50 25 12 6 3\n";
    ASSERT_EQ(run(fmt::format("case new --model '{}' --tokens '{}' --seed 3 -o '{}'", path("m"), path("p.txt"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  // The verdict table of a run: every line that names a stage output.
  static std::string table(const std::string& out) {
    std::string t;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.find("/") != std::string::npos && line.find("reports") == std::string::npos &&
          line.find("reproduce") == std::string::npos && line.find("tdiff run") == std::string::npos &&
          line.find("recorded") == std::string::npos)
        t += line + "\n";
    return t;
  }
};

TEST_F(TpSplitCli, Tp2PassesAndIsNamedTp1IsTodaysEmu) {
  const auto plain = run(fmt::format("run '{}' --policy fixed --seed 5 --all --no-reports", path("c.h5")));
  const auto tp1 = run(fmt::format("run '{}' --policy fixed --seed 5 --tp 1 --all --no-reports", path("c.h5")));
  ASSERT_EQ(plain.code, 0) << plain.out << plain.err;
  EXPECT_EQ(table(tp1.out), table(plain.out));
  for (const char* moe : {"sum_then_reduce", "reduce_each"}) {
    const auto tp2 = run(fmt::format("run '{}' --policy fixed --tp 2 --allreduce tree --moe-reduce {} -o '{}'", path("c.h5"),
                                     moe, path(std::string("r-") + moe)));
    EXPECT_EQ(tp2.code, 0) << tp2.out << tp2.err;
    EXPECT_NE(tp2.out.find("tp=2"), std::string::npos) << tp2.out;
    EXPECT_NE(testing::slurp(path(std::string("r-") + moe + "/report.json")).find("allreduce=tree"), std::string::npos);
  }
  const auto runs = testing::recorded_runs(path("c.h5"));
  ASSERT_FALSE(runs.empty());
  EXPECT_EQ(runs.back().env.extra.at("split"), "tp=2 ep=1 allreduce=tree moe_reduce=reduce_each channels=1");
  const auto ep = run(fmt::format("run '{}' --policy fixed --ep 4 --no-reports", path("c.h5")));
  EXPECT_EQ(ep.code, 0) << ep.out << ep.err;
}

TEST_F(TpSplitCli, BadSplitsAreOneLineAndExitTwo) {
  for (const std::string& args :
       {fmt::format("run '{}' --tp 3", path("c.h5")), fmt::format("run '{}' --tp 0", path("c.h5")),
        fmt::format("run '{}' --tp 16", path("c.h5")), fmt::format("run '{}' --tp 4", path("c.h5")),  // tiny: 2 groups
        fmt::format("run '{}' --ep 3", path("c.h5")), fmt::format("run '{}' --allreduce random --tp 2", path("c.h5")),
        fmt::format("run '{}' --backend hip --tp 3", path("c.h5")), fmt::format("bisect '{}' --tp 3", path("c.h5")),
        fmt::format("determinism '{}' --tp 16", path("c.h5")),
        fmt::format("determinism '{}' --tp-sweep 1,3", path("c.h5"))}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << args << ": " << r.err;
  }
}

TEST_F(TpSplitCli, SweepOfTwoRanksIsVacuousAndAPinnedOrderRepeats) {
  const auto sweep = run(fmt::format("determinism '{}' --tp-sweep 1,2 --orders ring,tree --no-reports", path("c.h5")));
  EXPECT_EQ(sweep.code, 1) << sweep.out << sweep.err;
  EXPECT_NE(sweep.out.find("verdict     VACUOUS"), std::string::npos) << sweep.out;
  EXPECT_NE(sweep.out.find("order-independent"), std::string::npos) << sweep.out;
  const auto pinned = run(fmt::format("determinism '{}' --tp 2 --allreduce ring --runs 2 --no-reports", path("c.h5")));
  EXPECT_EQ(pinned.code, 0) << pinned.out << pinned.err;
}

class TpSweepSmallCli : public testing::CliTest {};

TEST_F(TpSweepSmallCli, FourRanksRevealTheOrder) {  // small: 8 heads, 4 output groups
  std::ofstream(path("p.txt")) << "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n300 100 50 25 12 6 3 900 17\n";
  ASSERT_EQ(run(fmt::format("synth --preset small --seed 4 -o '{}'", path("m"))).code, 0);
  ASSERT_EQ(run(fmt::format("case new --model '{}' --tokens '{}' --seed 3 -o '{}'", path("m"), path("p.txt"), path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  const auto r = run(fmt::format("determinism '{}' --tp-sweep 1,2,4 --orders ring,tree --no-reports", path("c.h5")));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict     PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tp=4 tree"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tdiff
