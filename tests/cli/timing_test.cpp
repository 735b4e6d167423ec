// Where the time goes, through the binary: run and bisect print their phases, the session's
// reference store and the byte-copied case record keep what they should and change no result.
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "history_support.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "casefile/h5io.h"
#include "casefile/reference_store.h"
#include "base/timing.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::slurp;

class Timing : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 40 --seed 5 -o '{}'", path("m"), path("c.h5")))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
};

// A tensor read twice is kept; what get() hands out is the caller's to change.
TEST_F(Timing, ReferenceStoreKeepsWhatIsReadAgainAndHandsOutCopies) {
  const std::string c = path("c.h5");
  ReferenceStore refs(c, std::size_t{1} << 30);
  EXPECT_FALSE(refs.stages().empty());
  EXPECT_TRUE(refs.has_stage("lm_head"));
  EXPECT_FALSE(refs.has_stage("no.such.stage"));
  const Tensor first = refs.get("lm_head", "logits");
  EXPECT_EQ(refs.kept_bytes(), 0u);  // one read: nothing kept
  Tensor second = refs.get("lm_head", "logits");
  EXPECT_EQ(refs.kept_bytes(), second.nbytes());
  EXPECT_EQ(refs.reads(), 2u);
  for (double& v : second.span<double>()) v = 0;  // the caller's copy
  const Tensor third = refs.get_shared("lm_head", "logits");
  EXPECT_EQ(refs.hits(), 1u);
  EXPECT_EQ(std::memcmp(first.raw(), third.raw(), first.nbytes()), 0);
  // A budget below the tensor keeps nothing.
  ReferenceStore none(c, 1);
  none.get("lm_head", "logits");
  none.get("lm_head", "logits");
  EXPECT_EQ(none.kept_bytes(), 0u);
  EXPECT_EQ(none.reads(), 2u);
  EXPECT_THROW(refs.get("lm_head", "missing"), InputError);
}

// run: one timing line on stderr, the same phases in report.json; the byte-copied record
// leaves the reference as it was and the case readable.
TEST_F(Timing, RunPrintsWhereTheTimeWentAndKeepsTheCaseIntact) {
  const std::string c = path("c.h5");
  const Tensor before = h5_read(c, "/reference/lm_head/logits");
  const CliResult r = run(fmt::format("run '{}' --run-id t1 -o '{}'", c, path("rep")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("\ntiming: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("candidate "), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(slurp(path("rep/report.json")));
  ASSERT_TRUE(j.contains("timing_s")) << j.dump();
  EXPECT_TRUE(j["timing_s"].contains("candidate"));
  EXPECT_TRUE(j["timing_s"].contains("compare"));
  EXPECT_GT(j["timing_s"]["total"].get<double>(), 0.0);
  const Tensor after = h5_read(c, "/reference/lm_head/logits");
  ASSERT_EQ(before.nbytes(), after.nbytes());
  EXPECT_EQ(std::memcmp(before.raw(), after.raw(), before.nbytes()), 0);
  ASSERT_TRUE(testing::recorded_run(c, "t1"));
  EXPECT_EQ(testing::recorded_run(c, "t1")->verdict, "PASS");
  EXPECT_FALSE(testing::recorded_run(c, "t1")->timings.empty());
  // The same run id again replaces its record.
  ASSERT_EQ(run(fmt::format("run '{}' --run-id t1 --policy naive --no-reports", c)).code, 1);
  EXPECT_EQ(testing::recorded_run(c, "t1")->verdict, "FAIL");
  EXPECT_EQ(reference_stages(c).size(), 153u);
}

// bisect: a timing line per mixed run and bisect.json's per-step phases.
TEST_F(Timing, BisectPrintsEveryMixedRunsPhases) {
  const CliResult r = run(fmt::format("bisect '{}' --policy fp32 --floor fp32 --set 'L01.attn.core:qk_accum=fp16' -o '{}'",
                                      path("c.h5"), path("b")));
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("timing step 1: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("floor reference stages"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(slurp(path("b/bisect.json")));
  ASSERT_FALSE(j["trace"].empty());
  EXPECT_TRUE(j["trace"][0]["timing_s"].contains("candidate")) << j["trace"][0].dump();
}

TEST_F(Timing, ABadReferenceBudgetIsOneLine) {
  ::setenv("TDIFF_REF_CACHE_GB", "lots", 1);
  const CliResult r = run(fmt::format("run '{}' --no-reports", path("c.h5")));
  ::unsetenv("TDIFF_REF_CACHE_GB");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("TDIFF_REF_CACHE_GB: 'lots'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tdiff
