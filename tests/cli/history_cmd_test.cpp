// The run history from the command line: run, bisect and determinism record into
// tdiff-history.sqlite beside the case and leave the case file's bytes as they were; an older
// case's in-file records are read into the history once; `tdiff history` prints the builds and
// their steps and draws the dual curve; `tdiff gate` passes the same build, fails a planted
// fault and a slower build, and refuses what it cannot judge with exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "base/sha256.h"
#include "casefile/h5_writer.h"
#include "cli_support.h"
#include "history/history_db.h"

namespace tdiff {
namespace {

class HistoryCli : public testing::CliTest {
 protected:
  void make_case() {
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 24 --seed 2 -o '{}'", path("m"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  std::size_t count(const std::string& text, const std::string& what) const {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
};

TEST_F(HistoryCli, RunsAreRecordedBesideTheCaseWhichStaysAsItWas) {
  make_case();
  const std::string before = file_sha256(path("c.h5"));
  auto r = run(fmt::format("run '{}' --timed 2 --label base --no-reports", path("c.h5")));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verified bitwise"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recorded    run "), std::string::npos) << r.out;
  ASSERT_LE(run(fmt::format("bisect '{}' --policy naive --no-reports", path("c.h5"))).code, 1);
  ASSERT_EQ(run(fmt::format("determinism '{}' --runs 2 --no-reports", path("c.h5"))).code, 0);
  EXPECT_EQ(file_sha256(path("c.h5")), before) << "run, bisect and determinism rewrote the case";
  history::HistoryDb db(path(history::kHistoryFile), false);
  const auto runs = db.runs({"", "", "", 0, true});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].label, "base");
  EXPECT_EQ(runs[0].speed.repeats, 2);
  EXPECT_GT(runs[0].speed.tokens, 0);
  EXPECT_FALSE(runs[0].stages.empty());
  EXPECT_FALSE(runs[0].speed.class_seconds.empty());
  EXPECT_EQ(runs[1].kind, "bisect");
  EXPECT_EQ(runs[2].kind, "determinism");
  const std::string info = run(fmt::format("info '{}'", path("c.h5"))).out;
  EXPECT_NE(info.find("3 runs in "), std::string::npos) << info;
  // --no-record: nothing more; --history elsewhere: there.
  ASSERT_EQ(run(fmt::format("run '{}' --no-record --no-reports", path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("run '{}' --history '{}' --no-reports", path("c.h5"), path("other.sqlite"))).code, 0);
  EXPECT_EQ(db.count(), 3u);
  EXPECT_EQ(history::HistoryDb(path("other.sqlite"), false).count(), 1u);
}

TEST_F(HistoryCli, AnOlderCasesRecordsAreReadOnce) {
  make_case();
  {  // a record as tdiff kept them inside the case before the history existed
    H5Writer w(path("c.h5"), path("c.h5"));
    w.set_attr("/runs/run-20261101T000000Z-0001", "verdict", "FAIL");
    w.set_attr("/runs/run-20261101T000000Z-0001", "backend", "emu");
    w.set_attr("/runs/run-20261101T000000Z-0001", "report_csv", "stage,tensor,rel_l2,verdict\nL00.attn.core,o,0.5,FAIL\n");
    w.set_attr("/env/run-20261101T000000Z-0001", "date_utc", "2026-11-01T00:00:00Z");
    w.commit();
  }
  ASSERT_EQ(run(fmt::format("run '{}' --no-reports", path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("run '{}' --no-reports", path("c.h5"))).code, 0);
  history::HistoryDb db(path(history::kHistoryFile), false);
  const auto runs = db.runs({"", "", "", 0, true});
  ASSERT_EQ(runs.size(), 3u) << "the old record once, and the two runs";
  EXPECT_EQ(runs[0].verdict, "FAIL");
  ASSERT_EQ(runs[0].stages.size(), 1u);
  EXPECT_EQ(runs[0].stages[0].key, "L00.attn.core/o");
  EXPECT_DOUBLE_EQ(runs[0].stages[0].error, 0.5);
}

TEST_F(HistoryCli, HistoryShowsBuildsAndStepsAndGateJudgesThem) {
  make_case();
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run(fmt::format("run '{}' --timed 2 --label base --no-reports", path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("run '{}' --timed 2 --label same --no-reports", path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("run '{}' --timed 2 --label faulty --policy naive --no-reports", path("c.h5"))).code, 1);
  auto h = run(fmt::format("history '{}' --html '{}'", path("c.h5"), path("h.html")));
  ASSERT_EQ(h.code, 0) << h.out << h.err;
  EXPECT_NE(h.out.find("4 runs, 3 builds"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("at faulty"), std::string::npos) << "the naive build's step: " << h.out;
  std::ifstream page(path("h.html"));
  const std::string html((std::istreambuf_iterator<char>(page)), {});
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
  EXPECT_GE(count(html, "<svg"), 3u);
  EXPECT_NE(html.find("median forward (s)"), std::string::npos);
  EXPECT_NE(html.find("Per stage class: time against error"), std::string::npos);
  // The same build again passes (speed judged loosely: this machine's timing noise is not the point here).
  auto same = run(fmt::format("gate '{}' --baseline base --candidate same --speed-tolerance 5", path("c.h5")));
  EXPECT_EQ(same.code, 0) << same.out;
  auto faulty = run(fmt::format("gate '{}' --baseline base --speed-tolerance 5", path("c.h5")));
  EXPECT_EQ(faulty.code, 1) << faulty.out;
  EXPECT_NE(faulty.out.find("gate faulty against baseline base"), std::string::npos) << faulty.out;
  EXPECT_NE(faulty.out.find("new FAIL"), std::string::npos) << faulty.out;
  for (const std::string bad : {"--baseline nosuch", "--baseline base --candidate base", "--baseline base --speed maybe"})
    EXPECT_EQ(run(fmt::format("gate '{}' {}", path("c.h5"), bad)).code, 2) << bad;
  EXPECT_NE(run(fmt::format("gate '{}' --baseline nosuch", path("c.h5"))).err.find("no run or ci record labelled \"nosuch\""),
            std::string::npos);
  EXPECT_EQ(run(fmt::format("history '{}'", path("nowhere.h5"))).code, 2);
  EXPECT_EQ(run(fmt::format("history '{}'", path("m"))).code, 2) << "a folder without a history";
}

}  // namespace
}  // namespace tdiff
