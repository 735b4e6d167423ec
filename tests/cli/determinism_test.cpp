// `tdiff determinism` through the binary: naive is caught, fixed passes, both are recorded in
// the case; bad inputs exit 2 with one line.
#include <fstream>

#include "cli_support.h"
#include "history_support.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class DeterminismCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 4 -o '{}'", path("m"))).code, 0);
    std::ofstream(path("p.txt")) << "1 2 3 4 5 6 7 8 9 10 11\n200 100 50 25 12 6 3\n";
    ASSERT_EQ(run(fmt::format("case new --model '{}' --tokens '{}' --seed 3 -o '{}'", path("m"), path("p.txt"), path("c.h5"))).code, 0);
  }
};

TEST_F(DeterminismCli, NaiveIsCaughtFixedPassesAndBothAreRecorded) {
  const auto naive = run(fmt::format("determinism '{}' --policy naive --runs 3 --seed 3 -o '{}'", path("c.h5"), path("rn")));
  EXPECT_EQ(naive.code, 1) << naive.err;
  EXPECT_NE(naive.out.find("verdict     NONDETERMINISTIC"), std::string::npos) << naive.out;
  EXPECT_NE(naive.out.find("run 3 (seed 5,"), std::string::npos) << naive.out;
  EXPECT_NE(naive.out.find("reproduce   tdiff determinism"), std::string::npos);
  for (const char* f : {"report.html", "report.csv", "report.json", "junit.xml"})
    EXPECT_TRUE(fs::exists(path(std::string("rn/") + f))) << f;
  EXPECT_NE(testing::slurp(path("rn/report.html")).find("omp_threads"), std::string::npos);  // the environment

  const auto fixed = run(fmt::format("determinism '{}' --policy fixed --runs 2 --threads 1,2 --no-reports", path("c.h5")));
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("verdict     DETERMINISTIC"), std::string::npos) << fixed.out;

  const auto sweep = run(fmt::format("determinism '{}' --backend refcpu --batch-sweep 1,2,3 --pad-side both --no-reports", path("c.h5")));
  EXPECT_EQ(sweep.code, 0) << sweep.out << sweep.err;
  EXPECT_NE(sweep.out.find("BATCH-INVARIANT"), std::string::npos) << sweep.out;

  // All three recorded in the run history, each with its environment.
  const auto runs = testing::recorded_runs(path("c.h5"));
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].verdict, "NONDETERMINISTIC");
  EXPECT_EQ(runs[0].env.policy, "naive");
  EXPECT_EQ(runs[0].env.extra.at("run_seeds"), "3,4,5");
  EXPECT_EQ(runs[1].verdict, "DETERMINISTIC");
  EXPECT_EQ(runs[2].kind, "batch-sweep");
  EXPECT_EQ(runs[2].env.extra.at("batch_sweep"), "1,2,3");
  const std::string info = run(fmt::format("info '{}'", path("c.h5"))).out;
  EXPECT_NE(info.find("determinism NONDETERMINISTIC"), std::string::npos) << info;
}

TEST_F(DeterminismCli, BadInputsExitTwoWithOneLine) {
  for (const std::string& args :
       {fmt::format("determinism '{}' --runs 1", path("c.h5")), fmt::format("determinism '{}' --backend hip", path("c.h5")),
        fmt::format("determinism '{}' --stages 'L9*'", path("c.h5")), fmt::format("determinism '{}'", path("none.h5")),
        fmt::format("determinism '{}' --batch-sweep 0,2", path("c.h5")),
        fmt::format("determinism '{}' --on-device", path("c.h5")),  // emu compares on the host
        fmt::format("determinism '{}' --on-device --batch-sweep 1,2", path("c.h5"))}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << args << ": " << r.err;
  }
}
}  // namespace
}  // namespace tdiff
