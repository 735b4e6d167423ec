// Generation cases through the binary (docs/design/generation.md §1): case new --decode with
// prefill chunks, info showing the schedule, token verdicts in run's output and report.json,
// and the schedule's bad inputs (exit 2, one line).
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "casefile/case_file.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::count_lines;

class CliGeneration : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
  }
  CliResult new_case(const std::string& extra, const std::string& out = "g.h5") const {
    return run(fmt::format("case new --model '{}' --random-prompts 2 --len 40 --seed 5 {} -o '{}'", path("m"), extra,
                           path(out)));
  }
};

TEST_F(CliGeneration, ScheduledCaseIsJudgedTokenByToken) {
  const CliResult made = new_case("--decode 16 --prefill-chunks 5,3,16");
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.out.find("generation: prompt 24 (chunks 5,3,16), 16 decode steps"), std::string::npos) << made.out;
  const CaseInfo info = read_case(path("g.h5"));
  EXPECT_EQ(info.schedule.prompt, 24);
  EXPECT_EQ(info.schedule.chunks, (std::vector<std::int64_t>{5, 3, 16}));
  EXPECT_NE(run(fmt::format("info '{}'", path("g.h5"))).out.find("positions 23..39 predict the decoded tokens"),
            std::string::npos);

  ASSERT_EQ(run(fmt::format("golden '{}'", path("g.h5"))).code, 0);
  // fp32 explains its own flips: 17 steps x 2 rows, none WRONG.
  const CliResult fp32 = run(fmt::format("run '{}' --policy fp32 -o '{}'", path("g.h5"), path("r32")));
  EXPECT_EQ(fp32.code, 0) << fp32.out << fp32.err;
  EXPECT_NE(fp32.out.find("tokens      17 steps x 2 rows:"), std::string::npos) << fp32.out;
  EXPECT_NE(fp32.out.find(", 0 WRONG"), std::string::npos) << fp32.out;
  std::ifstream in(path("r32/report.json"));
  const auto j = nlohmann::json::parse(in);
  const auto& t = j.at("token_verdicts").begin().value();
  EXPECT_EQ(t.at("steps").size(), 34u);
  EXPECT_EQ(t.at("steps")[0].at("position"), 23);
  EXPECT_EQ(t.at("steps")[16].at("position"), 39);
  EXPECT_TRUE(t.at("bounded").get<bool>());
  EXPECT_EQ(t.at("counts").at("WRONG"), 0);
  // The logits rounded through fp16 before the head's softmax: tokens the formats do not explain.
  const CliResult naive = run(fmt::format("run '{}' --policy naive --no-reports", path("g.h5")));
  EXPECT_EQ(naive.code, 1) << naive.out;
  EXPECT_NE(naive.out.find("tokens      17 steps x 2 rows:"), std::string::npos) << naive.out;
}

// emu runs the schedule in steps against its cache (exec/step_run.h); the step axis names
// where a bound first broke; --as-prefill runs the whole sequence as one prefill instead.
TEST_F(CliGeneration, StepsAgainstTheCacheHaveTheirOwnAxis) {
  ASSERT_EQ(new_case("--decode 16 --prefill-chunks 5,3,16").code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("g.h5"))).code, 0);
  const CliResult stepped = run(fmt::format("run '{}' --policy fixed --no-record -o '{}'", path("g.h5"), path("r")));
  EXPECT_EQ(stepped.code, 0) << stepped.out << stepped.err;
  EXPECT_NE(stepped.out.find("candidate emu, 19 generation steps against its cache"), std::string::npos) << stepped.out;
  EXPECT_NE(stepped.out.find("steps       19 steps against the cache, no tensor failed; the worst step: schedule step"),
            std::string::npos) << stepped.out;
  std::ifstream in(path("r/report.json"));
  const auto j = nlohmann::json::parse(in);
  const auto& steps = j.at("generation_steps").at("steps");
  ASSERT_EQ(steps.size(), 19u);
  EXPECT_EQ(steps[1].at("begin"), 5);
  EXPECT_EQ(steps[1].at("end"), 8);
  EXPECT_TRUE(steps[18].at("decode").get<bool>());
  std::size_t with_steps = 0;
  for (const auto& row : j.at("rows"))
    if (row.contains("step_rel_l2")) {
      ++with_steps;
      EXPECT_EQ(row.at("step_rel_l2").size(), 19u) << row.at("stage");
    }
  EXPECT_GT(with_steps, 100u);

  const CliResult naive = run(fmt::format("run '{}' --policy naive --no-reports --no-record", path("g.h5")));
  EXPECT_EQ(naive.code, 1);
  EXPECT_NE(naive.out.find("steps       schedule step 1/19 (prefill chunk, positions 0..4) is the first where a failing "
                           "tensor passes its bound"),
            std::string::npos) << naive.out;

  const CliResult whole = run(fmt::format("run '{}' --policy fixed --as-prefill --no-reports --no-record", path("g.h5")));
  EXPECT_EQ(whole.code, 0) << whole.out;
  EXPECT_NE(whole.out.find("candidate emu, the schedule run as one prefill"), std::string::npos) << whole.out;
  EXPECT_EQ(whole.out.find("\nsteps "), std::string::npos) << whole.out;
}

// --p-vs-d: the candidate's steps against its own prefill (no reference): emu fixed's decode is
// its prefill bit for bit on this model, fp32's differs in the last bits without moving a token.
TEST_F(CliGeneration, PrefillVsDecodeComparesTheCandidateWithItself) {
  ASSERT_EQ(new_case("--decode 16 --prefill-chunks 5,3,16").code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("g.h5"))).code, 0);
  const CliResult fixed = run(fmt::format("run '{}' --policy fixed --p-vs-d --no-record -o '{}'", path("g.h5"), path("r")));
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("p_vs_d      19 steps against its own prefill: lm_head/logits over 34 predicting rows "
                           "bit-identical"),
            std::string::npos) << fixed.out;
  std::ifstream in(path("r/report.json"));
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("p_vs_d").at("differing"), 0);
  EXPECT_EQ(j.at("p_vs_d").at("rows"), 34);
  const CliResult fp32 = run(fmt::format("run '{}' --policy fp32 --p-vs-d --no-reports --no-record", path("g.h5")));
  EXPECT_NE(fp32.out.find("elements differ"), std::string::npos) << fp32.out;
  EXPECT_NE(fp32.out.find("top-1 agreement 100.00%"), std::string::npos) << fp32.out;

  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 3 -o '{}'", path("m"),
                            path("prefill.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("prefill.h5"))).code, 0);
  const CliResult bad = run(fmt::format("run '{}' --p-vs-d --no-reports --no-record", path("prefill.h5")));
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(count_lines(bad.err), 1u) << bad.err;
  EXPECT_NE(bad.err.find("--p-vs-d needs a generation case"), std::string::npos) << bad.err;
}

// bisect of a generation case runs its mixed runs in steps too, and says at which step each
// culprit moves the watched logits (first beyond floor_k, else most).
TEST_F(CliGeneration, BisectNamesTheStepACulpritMoves) {
  ASSERT_EQ(new_case("--decode 16 --prefill-chunks 5,3,16").code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("g.h5"))).code, 0);
  const CliResult b = run(fmt::format("bisect '{}' --policy naive --seed 14077758207354166224 --no-record -o '{}'",
                                      path("g.h5"), path("b")));
  EXPECT_EQ(b.code, 1) << b.out << b.err;
  EXPECT_NE(b.out.find("culprit   L02.moe.router"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("lm_head/logits most at schedule step"), std::string::npos) << b.out;
  std::ifstream in(path("b/bisect.json"));
  const auto j = nlohmann::json::parse(in);
  for (const auto& c : j.at("search").at("culprits"))
    EXPECT_NE(c.at("generation_step").get<std::string>().find("(decode, position"), std::string::npos) << c;
}

// An engine's dump of a generation case (tap_emu: emu through the tap) gets the same token
// verdicts; without a policy for its formats only exact ties are TIE-FLIPs, and the report says so.
TEST_F(CliGeneration, AnEnginesDumpIsJudgedTokenByToken) {
  ASSERT_EQ(new_case("--decode 8").code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("g.h5"))).code, 0);
  const int status =
      std::system(fmt::format("'{}' '{}' fixed 7 '{}' run >/dev/null", TAP_EMU_BIN, path("g.h5"), path("d.h5")).c_str());
  ASSERT_EQ(status, 0);
  const CliResult with = run(fmt::format("run '{}' --candidate-dump '{}' --dump-policy fixed --no-reports --no-record",
                                         path("g.h5"), path("d.h5")));
  EXPECT_NE(with.out.find("tokens      9 steps x 2 rows:"), std::string::npos) << with.out << with.err;
  EXPECT_EQ(with.out.find("no expected error"), std::string::npos) << with.out;
  const CliResult without =
      run(fmt::format("run '{}' --candidate-dump '{}' --no-reports --no-record", path("g.h5"), path("d.h5")));
  EXPECT_NE(without.out.find("(no expected error: only exact ties are TIE-FLIPs"), std::string::npos) << without.out;
}

TEST_F(CliGeneration, BadSchedulesExitTwoWithOneLine) {
  struct Bad {
    std::string args, what;
  } cases[] = {
      {"--decode 40", "40 decode steps in rows of 40 tokens"},
      {"--decode 8 --prefill-chunks 5,3", "prefill chunks 5,3 sum to 8, not the prompt's 32 tokens"},
      {"--decode 8 --prefill-chunks 5,x,27", "--prefill-chunks '5,x,27': 'x' is not a positive number"},
      {"--decode 8 --prefill-chunks 5,0,27", "'0' is not a positive number"},
      {"--decode 8 --pad-to 48", "row 0 holds 40 of 48 tokens"},
      {"--generate 4 --decode 3", "--decode excludes --generate"},
      {"--prefill-chunks 5,35", "--prefill-chunks requires --decode or --generate"},
      {"--generate 4 --prefill-chunks 5,3", "prefill chunks 5,3 sum to 8, not the prompt's 40 tokens"},
      {"--generate 4 --pad-to 48", "--generate: prompt 0 has 40 tokens of 48"},
      {"--generate 2000000", "--generate 2000000: 2000040 tokens in all, more than the model's 1048576 positions"},
  };
  for (const auto& c : cases) {
    const CliResult r = new_case(c.args, "bad.h5");
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("bad.h5"))) << c.args;
  }
}

// The reference chooses the decoded tokens greedily (exec/greedy.h); the prompt is kept and the
// case runs like any generation case.
TEST_F(CliGeneration, GeneratedTokensMakeACaseThatRuns) {
  const CliResult made = new_case("--generate 12 --prefill-chunks 7,33", "gen.h5");
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.out.find("2 prompts x 52 tokens (generation: prompt 40 (chunks 7,33), 12 decode steps)"),
            std::string::npos) << made.out;
  ASSERT_EQ(new_case("", "plain.h5").code, 0);
  const CaseInfo gen = read_case(path("gen.h5")), plain = read_case(path("plain.h5"));
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t p = 0; p < 40; ++p)
      EXPECT_EQ(gen.batch.ids.data<std::int64_t>()[b * 52 + p], plain.batch.ids.data<std::int64_t>()[b * 40 + p]);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("gen.h5"))).code, 0);
  const CliResult r = run(fmt::format("run '{}' --policy fp32 --no-reports --no-record", path("gen.h5")));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tokens      13 steps x 2 rows:"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tdiff
