// tdiff bisect through the binary: exit codes (0 nothing crosses the threshold, 1 a culprit,
// 2 an input error), the terminal trace, the report files and the run's record in the case.
#include <set>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::count_lines;
using testing::slurp;

class CliBisect : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 32 --seed 2 -o '{}'", path("m"), path("c.h5")))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  std::string c() const { return "'" + path("c.h5") + "'"; }
};

TEST_F(CliBisect, FaultIsNamedExitsOneAndWritesTheReports) {
  const CliResult r = run(fmt::format("bisect {} --set 'L01.attn.q_a:matmul_input=fp8' --seed 7 -o '{}'", c(), path("rep")));
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("first culprit L01.attn.q_a (attn.q_a)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("culprit   L01.attn.q_a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  1  full"), std::string::npos) << "the trace lists every mixed run";
  EXPECT_NE(r.out.find("  2  search"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mixed runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reproduce tdiff bisect"), std::string::npos) << r.out;
  for (const char* f : {"bisect.html", "bisect.json", "trace.csv", "report.html", "report.csv", "report.json", "junit.xml"})
    EXPECT_TRUE(std::filesystem::exists(path(std::string("rep/") + f))) << f;

  const auto j = nlohmann::json::parse(slurp(path("rep/bisect.json")));
  EXPECT_EQ(j["search"]["culprits"][0]["stage"], "L01.attn.q_a");
  EXPECT_EQ(j["search"]["passes_after"], true);
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_LE(j["totals"]["mixed_runs"].get<int>(), 10);  // ceil(log2 153) + 2
  EXPECT_EQ(j["trace"].size(), j["totals"]["mixed_runs"].get<std::size_t>());

  const std::string csv = slurp(path("rep/trace.csv"));
  EXPECT_EQ(csv.rfind("step,phase,prefix,pinned,group,split,tensor,error", 0), 0u) << csv;
  EXPECT_EQ(count_lines(csv), j["trace"].size() + 1);

  const std::string html = slurp(path("rep/bisect.html"));
  for (const char* s : {"Search trace", "Culprits", "L01.attn.q_a", "<svg", "report.html"})
    EXPECT_NE(html.find(s), std::string::npos) << s;

  // The bisection is recorded in the case.
  const std::string info = run(fmt::format("info {}", c())).out;
  EXPECT_NE(info.find("bisect-"), std::string::npos) << info;
}

// --suffix floor: the floor runs the stages after each split; the same culprit, no companion
// runs, and the reports say what ran after the split.
TEST_F(CliBisect, TheFloorAfterTheSplitNamesTheSameCulprit) {
  const CliResult r = run(fmt::format("bisect {} --set 'L01.attn.q_a:matmul_input=fp8' --seed 7 --suffix floor -o '{}'", c(),
                                      path("rep-floor")));
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("first culprit L01.attn.q_a (attn.q_a)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on the floor the candidate passes"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("floor stages"), std::string::npos) << "the timing lines name the floor's stages\n" << r.err;
  EXPECT_NE(r.out.find("--suffix floor"), std::string::npos) << "the reproduce command keeps it\n" << r.out;
  const auto j = nlohmann::json::parse(slurp(path("rep-floor/bisect.json")));
  EXPECT_EQ(j["rest"], "the floor");
  EXPECT_EQ(j["totals"]["floor_runs"], 1);
  EXPECT_NE(slurp(path("rep-floor/bisect.html")).find("the rest on the floor"), std::string::npos);
}

TEST_F(CliBisect, NothingCrossesTheThresholdExitsZero) {
  const CliResult r = run(fmt::format("bisect {} --no-reports", c()));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("nothing crosses the threshold"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 mixed run"), std::string::npos) << r.out;
}

// An inconclusive search still points somewhere: the stages that deviate most from the floor
// on their own inputs, in every report, and a next command that runs.
TEST_F(CliBisect, InconclusiveSearchRanksTheStagesAndSuggestsTheNextCommand) {
  const CliResult r = run(fmt::format("bisect {} --set 'L02.attn.core:qk_accum=fp16' -o '{}'", c(), path("rep")));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("result    inconclusive: nothing crosses the threshold"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the largest local deviation from the floor is "), std::string::npos) << r.out;
  const auto rank5 = r.out.find("\n   5  "), rank6 = r.out.find("\n   6  ");
  EXPECT_NE(rank5, std::string::npos) << "five leads: " << r.out;
  EXPECT_EQ(rank6, std::string::npos) << "no more than five: " << r.out;
  const auto next = r.out.find("next      tdiff bisect ");
  ASSERT_NE(next, std::string::npos) << r.out;
  std::string cmd = r.out.substr(next + 16, r.out.find('\n', next) - next - 16);
  EXPECT_NE(cmd.find(" --watch "), std::string::npos) << cmd;

  const auto j = nlohmann::json::parse(slurp(path("rep/bisect.json")));
  EXPECT_GE(j["inconclusive"]["leads"].size(), 5u);
  EXPECT_EQ(j["inconclusive"]["next_command"].get<std::string>().rfind("tdiff bisect ", 0), 0u);
  EXPECT_TRUE(std::filesystem::exists(path("rep/leads.csv")));
  EXPECT_NE(slurp(path("rep/bisect.html")).find("Inconclusive: where to look"), std::string::npos);

  // The suggested command is a valid command line (exit 0 or 1, never a usage error), and
  // following the suggestions never loops: each next command differs from the one that
  // printed it (watching the lead already, none is suggested).
  std::set<std::string> seen = {cmd};
  for (int hop = 0; hop < 4; ++hop) {
    const CliResult again = run(cmd + " --no-reports");
    ASSERT_TRUE(again.code == 0 || again.code == 1) << cmd << "\n" << again.out << again.err;
    const auto n = again.out.find("next      tdiff bisect ");
    if (again.code == 1 || n == std::string::npos) break;
    cmd = again.out.substr(n + 16, again.out.find('\n', n) - n - 16);
    EXPECT_TRUE(seen.insert(cmd).second) << "the suggestion loops: " << cmd << "\n" << again.out;
  }
}

// The trace reaches a log as each mixed run ends, not at exit: in one stream for stdout and
// stderr (as CI captures it), the first trace row comes before the progress of the work after it.
TEST_F(CliBisect, TraceRowsReachALogAsTheyHappen) {
  const std::string log = path("log.txt");
  const int status = std::system(
      fmt::format("'{}' bisect {} --set 'L02.attn.core:qk_accum=fp16' --no-reports >'{}' 2>&1", TDIFF_BIN, c(), log).c_str());
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string out = slurp(log);
  const auto floor = out.find("bisect: all-floor run"), row = out.find("   1  full"), isolating = out.find("bisect: [1/");
  ASSERT_NE(floor, std::string::npos) << out;
  ASSERT_NE(row, std::string::npos) << out;
  ASSERT_NE(isolating, std::string::npos) << out;
  EXPECT_LT(floor, row) << out;
  EXPECT_LT(row, isolating) << "the row was held back until exit: " << out;
}

TEST_F(CliBisect, IsolateAndAttribute) {
  const CliResult iso = run(fmt::format("bisect {} --set 'L01.attn.q_a:matmul_input=fp8' --mode isolate -o '{}'", c(), path("iso")));
  EXPECT_EQ(iso.code, 1) << iso.out << iso.err;
  EXPECT_NE(iso.out.find("isolation"), std::string::npos) << iso.out;
  EXPECT_NE(iso.out.find("   1  L01.attn.q_a/out"), std::string::npos) << iso.out;
  EXPECT_TRUE(std::filesystem::exists(path("iso/isolation.csv")));

  const CliResult att = run(fmt::format("bisect {} --policy naive --mode isolate --attribute --attribute-by kind -o '{}'",
                                        c(), path("att")));
  EXPECT_EQ(att.code, 1) << att.out << att.err;
  EXPECT_NE(att.out.find("attribution by operator kind"), std::string::npos) << att.out;
  const std::string csv = slurp(path("att/attribution.csv"));
  EXPECT_EQ(csv.rfind("group,stages,step,error,share", 0), 0u) << csv;
  EXPECT_NE(csv.find("attention,"), std::string::npos) << csv;
  EXPECT_NE(slurp(path("att/bisect.html")).find("Attribution by operator kind"), std::string::npos);
}

TEST_F(CliBisect, InputErrorsExitTwoWithOneLine) {
  for (const std::string args : {"--watch L99.attn.core", "--watch lm_head/nope", "--floor nosuchpolicy",
                                 "--set 'L99.attn.core:qk_accum=fp16'", "--mode fast", "--suffix gpu",
                                 "--suffix floor --floor none"}) {
    const CliResult r = run(fmt::format("bisect {} {} --no-reports", c(), args));
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_LE(count_lines(r.err), 3u) << args << "\n" << r.err;
  }
  const CliResult no_floor = run(fmt::format("bisect {} --suffix floor --floor none --no-reports", c()));
  EXPECT_NE(no_floor.err.find("--suffix floor needs a floor"), std::string::npos) << no_floor.err;
  const CliResult watch = run(fmt::format("bisect {} --watch L99.attn.core --no-reports", c()));
  EXPECT_NE(watch.err.find("L99.attn.core"), std::string::npos) << watch.err;

  // A case without a reference.
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 3 -o '{}'", path("m"), path("bare.h5")))
                .code,
            0);
  const CliResult bare = run(fmt::format("bisect '{}' --no-reports", path("bare.h5")));
  EXPECT_EQ(bare.code, 2) << bare.out << bare.err;
  EXPECT_NE(bare.err.find("tdiff golden"), std::string::npos) << bare.err;
}

}  // namespace
}  // namespace tdiff
