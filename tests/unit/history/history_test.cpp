// The run history: records round-trip through SQLite (NaN as "not measured"), several
// processes record into one file at once, steps are found where a series changes level and
// nowhere in noise, and the gate's rule holds a candidate build to a baseline.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "base/error.h"
#include "history/gate.h"
#include "history/history_db.h"
#include "history/series.h"

namespace tdiff::history {
namespace {

namespace fs = std::filesystem;

class History : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tdiff-history-{}-{}", getpid(), testing::UnitTest::GetInstance()->random_seed());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string db() const { return (dir_ / kHistoryFile).string(); }

  // A run of `label` with one tensor of error `err`, a logits KL and a timed forward.
  static RunEntry entry(const std::string& id, const std::string& label, double err, double seconds,
                        const std::string& verdict = "PASS", const std::string& verified = "bitwise") {
    RunEntry e;
    e.id = id, e.kind = "run", e.case_path = "/cases/c.h5", e.case_name = "c", e.label = label;
    e.date_utc = "2026-12-07T10:00:" + id.substr(id.size() - 2) + "Z";
    e.verdict = verdict;
    e.logits_kl = err * 0.1;
    e.logits_top1 = 0.99;
    e.stages = {{"L00.attn.core/o", "attn.core", err, 0.01, err / 0.01, verdict}};
    e.speed.repeats = 3, e.speed.forward_s = seconds, e.speed.spread_s = 0.001, e.speed.verified = verified;
    e.speed.class_seconds = {{"attn.core", seconds / 2}};
    return e;
  }
  fs::path dir_;
};

TEST_F(History, ARecordComesBackAsItWentIn) {
  HistoryDb h(db());
  RunEntry e = entry("run-01", "main", 0.004, 0.25);
  e.env.git_commit = "abc1234";
  e.env.extra["gpu"] = "none";
  e.attrs["watch"] = "lm_head/logits";
  e.timings = {{"open", 0.5}, {"total", 2.0}};
  e.logits_top10 = kNone;  // not measured
  h.add(e);
  const auto back = h.runs({"/cases/c.h5", "", "", 0, true});
  ASSERT_EQ(back.size(), 1u);
  const RunEntry& b = back[0];
  EXPECT_EQ(b.label, "main");
  EXPECT_EQ(b.env.git_commit, "abc1234");
  EXPECT_EQ(b.env.extra.at("gpu"), "none");
  EXPECT_EQ(b.attrs.at("watch"), "lm_head/logits");
  EXPECT_TRUE(std::isnan(b.logits_top10));
  EXPECT_DOUBLE_EQ(b.logits_kl, 0.0004);
  ASSERT_EQ(b.stages.size(), 1u);
  EXPECT_EQ(b.stages[0].op_class, "attn.core");
  EXPECT_DOUBLE_EQ(b.stages[0].ratio, 0.4);
  ASSERT_EQ(b.timings.size(), 2u);
  EXPECT_EQ(b.timings[1].first, "total");
  EXPECT_DOUBLE_EQ(b.speed.class_seconds.at("attn.core"), 0.125);
  h.add(entry("run-01", "main", 0.005, 0.25));  // the same id again replaces it
  EXPECT_EQ(h.count(), 1u);
  EXPECT_EQ(h.runs({"", "", "", 0, true})[0].stages.size(), 1u);
}

TEST_F(History, SeveralProcessesRecordIntoOneFileAtOnce) {
  HistoryDb(db()).count();  // created
  constexpr int kProcs = 4, kEach = 25;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        HistoryDb h(db());
        for (int i = 0; i < kEach; ++i) h.add(entry(fmt::format("run-{}-{:02}", p, i), "main", 0.001 * i, 0.1));
      } catch (...) {
        code = 1;
      }
      _exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(HistoryDb(db()).count(), static_cast<std::size_t>(kProcs * kEach));
}

TEST_F(History, AFileThatIsNoHistoryIsOneClearError) {
  { std::ofstream(db()) << "not a database, just text that is long enough to be read as a header....."; }
  try {
    HistoryDb h(db());
    FAIL() << "opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(db()), std::string::npos) << e.what();
  }
  EXPECT_THROW(HistoryDb((dir_ / "missing.sqlite").string(), false), InputError);
}

TEST(Steps, FoundWhereTheLevelChangesAndNowhereInNoise) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.01);
  std::vector<double> y;
  for (int i = 0; i < 12; ++i) y.push_back(1.0 + noise(rng) + (i >= 7 ? 0.5 : 0));
  const auto steps = detect_steps(y, 0.05);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].at, 7u);
  EXPECT_NEAR(steps[0].before, 1.0, 0.03);
  EXPECT_NEAR(steps[0].after, 1.5, 0.03);
  std::vector<double> flat;
  for (int i = 0; i < 12; ++i) flat.push_back(1.0 + noise(rng));
  EXPECT_TRUE(detect_steps(flat, 0.05).empty());
  y.insert(y.begin() + 3, kNone);  // a build without the figure is skipped, the index kept
  ASSERT_EQ(detect_steps(y, 0.05).size(), 1u);
  EXPECT_EQ(detect_steps(y, 0.05)[0].at, 8u);
}

TEST(Series, BuildsInTheOrderTheyFirstRanWithMediansAndSpreads) {
  std::vector<RunEntry> runs;
  for (const auto& [id, label, s] : std::vector<std::tuple<std::string, std::string, double>>{
           {"r-01", "a", 1.0}, {"r-02", "b", 2.0}, {"r-03", "a", 1.2}, {"r-04", "a", 1.1}}) {
    RunEntry e;
    e.id = id, e.label = label, e.date_utc = id;
    e.speed.repeats = 1, e.speed.forward_s = s;
    runs.push_back(e);
  }
  const auto builds = builds_of(runs);
  ASSERT_EQ(builds.size(), 2u);
  EXPECT_EQ(builds[0].label, "a");
  EXPECT_DOUBLE_EQ(builds[0].figures.at("forward_s").value, 1.1);
  EXPECT_NEAR(builds[0].figures.at("forward_s").spread, 0.2, 1e-12);
  EXPECT_TRUE(std::isnan(builds[1].figures.at("forward_s").spread));
  EXPECT_NEAR(series_noise(builds, "forward_s", 0.01), 0.2, 1e-12);
}

class Gate : public History {
 protected:
  static CaseGate judge(const std::vector<RunEntry>& runs, GateOptions o = {}) {
    o.baseline = "base", o.candidate = "cand";
    return gate_case("c.h5", runs, o);
  }
  static bool has(const CaseGate& g, GateLevel level, const std::string& what) {
    for (const auto& f : g.findings)
      if (f.level == level && f.what.find(what) != std::string::npos) return true;
    return false;
  }
};

TEST_F(Gate, TheSameBuildAgainPasses) {
  const auto g = judge({entry("r-01", "base", 0.004, 0.250), entry("r-02", "cand", 0.004, 0.251)});
  EXPECT_TRUE(g.pass());
}

TEST_F(Gate, LessAccurateFails) {
  const auto g = judge({entry("r-01", "base", 0.004, 0.25), entry("r-02", "cand", 0.0045, 0.25)});
  EXPECT_FALSE(g.pass());
  EXPECT_TRUE(has(g, GateLevel::fail, "error of L00.attn.core/o worse"));
  EXPECT_TRUE(has(g, GateLevel::fail, "logits KL worse"));
  // Within the noise the repeats measured, the same change passes.
  const auto noisy = judge({entry("r-01", "base", 0.004, 0.25), entry("r-02", "base", 0.0050, 0.25),
                            entry("r-03", "cand", 0.0045, 0.25)});
  EXPECT_FALSE(has(noisy, GateLevel::fail, "error of"));
}

TEST_F(Gate, ANewFailFails) {
  const auto g = judge({entry("r-01", "base", 0.004, 0.25), entry("r-02", "cand", 0.004, 0.25, "FAIL")});
  EXPECT_TRUE(has(g, GateLevel::fail, "new FAIL"));
}

TEST_F(Gate, SlowerOrUnverifiedFails) {
  EXPECT_TRUE(has(judge({entry("r-01", "base", 0.004, 0.25), entry("r-02", "cand", 0.004, 0.30)}), GateLevel::fail, "slower"));
  const auto unverified = judge({entry("r-01", "base", 0.004, 0.25),
                                 entry("r-02", "cand", 0.004, 0.20, "PASS", "no: the timed forward's logits are FAIL")});
  EXPECT_TRUE(has(unverified, GateLevel::fail, "speed not verified"));
  RunEntry untimed = entry("r-02", "cand", 0.004, 0.25);
  untimed.speed = {};
  EXPECT_TRUE(has(judge({entry("r-01", "base", 0.004, 0.25), untimed}), GateLevel::fail, "speed not measured"));
  GateOptions accuracy_only;
  accuracy_only.speed = false;
  EXPECT_TRUE(judge({entry("r-01", "base", 0.004, 0.25), untimed}, accuracy_only).pass());
}

TEST_F(Gate, AnUnexplainedImprovementIsFlaggedUnlessAccepted) {
  const std::vector<RunEntry> runs = {entry("r-01", "base", 0.004, 0.25), entry("r-02", "cand", 0.002, 0.25)};
  const auto g = judge(runs);
  EXPECT_FALSE(g.pass());
  EXPECT_TRUE(has(g, GateLevel::flag, "better"));
  GateOptions accept;
  accept.accept_improvements = true;
  EXPECT_TRUE(judge(runs, accept).pass());
}

TEST_F(Gate, AMissingLabelFails) {
  const auto g = judge({entry("r-01", "base", 0.004, 0.25)});
  EXPECT_FALSE(g.pass());
  EXPECT_TRUE(has(g, GateLevel::fail, "no runs"));
}

}  // namespace
}  // namespace tdiff::history
