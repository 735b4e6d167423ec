// Commands that update one case at the same time: each update takes the case's lock
// (casefile/case_file.h CaseUpdate), so no record is lost, and a verdict is recorded only
// beside the reference it was reached against.
#include <sys/wait.h>

#include <set>

#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "cli_support.h"
#include "history_support.h"

namespace tdiff {
namespace {

using testing::CliResult;

class CliConcurrency : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 40 --seed 5 -o '{}'", path("m"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  // Starts every command at once in one shell and waits for all; exit codes in order.
  std::vector<int> run_together(const std::vector<std::string>& args) const {
    std::string script;
    for (std::size_t i = 0; i < args.size(); ++i)
      script += fmt::format("('{}' {} >'{}' 2>'{}'; echo $? >'{}') & ", TDIFF_BIN, args[i], path(fmt::format("out{}", i)),
                            path(fmt::format("err{}", i)), path(fmt::format("rc{}", i)));
    script += "wait";
    EXPECT_EQ(std::system(script.c_str()), 0);
    std::vector<int> codes;
    for (std::size_t i = 0; i < args.size(); ++i) codes.push_back(std::stoi(testing::slurp(path(fmt::format("rc{}", i)))));
    return codes;
  }
  std::string err(std::size_t i) const { return testing::slurp(path(fmt::format("err{}", i))); }
};

TEST_F(CliConcurrency, RunsRecordingAtOnceKeepEveryRecord) {
  std::vector<std::string> args;
  for (int k = 0; k < 4; ++k) args.push_back(fmt::format("run '{}' --policy fp32 --no-reports --run-id r{}", path("c.h5"), k));
  const std::vector<int> codes = run_together(args);
  for (std::size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << err(i);
  for (int k = 0; k < 4; ++k) {
    const auto rec = testing::recorded_run(path("c.h5"), fmt::format("r{}", k));
    ASSERT_TRUE(rec) << "record r" << k << " lost";
    EXPECT_EQ(rec->env.policy, "fp32");
  }
  // Nothing is left beside the case: no lock file, no temporary.
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".c.h5."), std::string::npos) << e.path();
}

TEST_F(CliConcurrency, ARunDuringGoldenNeverDropsGoldensReference) {
  // Long prompts: golden takes a second or two, so the run most often starts on the old
  // reference (either order must keep golden's reference).
  const std::string c = path("long.h5");
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 900 --seed 5 -o '{}'", path("m"), c)).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  const std::string before = reference_id(c);
  const std::vector<int> codes =
      run_together({fmt::format("golden '{}'", c), fmt::format("run '{}' --policy fp32 --no-reports --run-id during", c)});
  EXPECT_EQ(codes[0], 0) << err(0);
  const std::string after = reference_id(c);
  EXPECT_NE(after, before);  // golden's new reference is the one kept
  EXPECT_TRUE(read_env_records(c).count(after));
  const bool recorded = testing::recorded_run(c, "during").has_value();
  if (codes[1] == 0) {
    EXPECT_TRUE(recorded);  // it recorded beside the reference it read (golden's, or before golden took the lock)
  } else {
    // It read the old one: the verdict is not recorded beside the new reference.
    EXPECT_EQ(codes[1], 2) << err(1);
    EXPECT_NE(err(1).find("its reference was recomputed by another command meanwhile"), std::string::npos) << err(1);
    EXPECT_FALSE(recorded);
  }
  EXPECT_EQ(run(fmt::format("run '{}' --policy fp32 --no-reports", c)).code, 0);
}

TEST_F(CliConcurrency, SavingRunsAtOnceKeepEveryRun) {
  // --save holds the case's lock through the run, --save-to the file's: both kinds at once.
  const std::string c = path("c.h5"), s = path("saved.h5");
  const std::vector<int> codes = run_together(
      {fmt::format("run '{}' --policy fp32 --no-reports --save --run-id s0", c),
       fmt::format("run '{}' --policy fp32 --no-reports --run-id p0", c),
       fmt::format("run '{}' --policy fp32 --no-reports --no-record --save-to '{}' --run-id t0", c, s),
       fmt::format("run '{}' --policy fp32 --no-reports --no-record --save-to '{}' --run-id t1", c, s)});
  for (std::size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << err(i);
  for (const char* id : {"s0", "p0"}) EXPECT_TRUE(testing::recorded_run(c, id)) << id;
  EXPECT_TRUE(h5_exists(c, "/runs/s0/lm_head/logits"));  // --save's tensors go into the case
  const auto saved = h5_list_children(s, "/runs");
  EXPECT_EQ(saved, (std::vector<std::string>{"t0", "t1"}));
}

TEST_F(CliConcurrency, ReportsAreWrittenBeforeTheRecord) {
  // A report folder that cannot be written: exit 2, nothing recorded, and the case is unchanged.
  const auto size = std::filesystem::file_size(path("c.h5"));
  const auto runs = testing::recorded_runs(path("c.h5")).size();
  const CliResult r = run(fmt::format("run '{}' --policy fp32 -o /dev/null/reports", path("c.h5")));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(testing::recorded_runs(path("c.h5")).size(), runs);
  EXPECT_EQ(std::filesystem::file_size(path("c.h5")), size);
}

}  // namespace
}  // namespace tdiff
