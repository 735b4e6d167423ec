// The precision audit (bisect/audit.h) and `tdiff audit`: rows, factors, the run-to-run column
// and the report files, on a tiny-model case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gates/audit.h"
#include "core/error.h"
#include "emu_case.h"
#include "report/audit_report.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class Audit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-audit-{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const ModelConfig tiny = synth_preset("tiny");
    // 128 tokens: two KV blocks, CSA/HCA entries, the indexer selecting among exact ties.
    const auto c = testing::cached_golden_case("audit", [&](const fs::path& d) {
      testing::build_golden_case(d, tiny, 1, {testing::random_ids(128, tiny.vocab_size, 31)}, 128);
    });
    case_ = new testing::CachedCase(c);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete case_;
  }
  static CaseSession session() { return open_session(case_->path, case_->model); }
  // The case and its model folder, for command lines.
  static std::string args() { return case_->path + " --model " + case_->model; }
  static std::string read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static int sh(const std::string& cmd) { return WEXITSTATUS(std::system((cmd + " > /dev/null 2>&1").c_str())); }
  static fs::path* dir_;
  static testing::CachedCase* case_;
};
fs::path* Audit::dir_ = nullptr;
testing::CachedCase* Audit::case_ = nullptr;

TEST_F(Audit, RowsAndFactors) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"sinkhorn", "topk_ties", "mask_style"};
  opt.full_runs = false;
  const AuditResult r = run_audit(s, Policy::preset("fixed"), opt);
  ASSERT_EQ(r.rows.size(), 3u);
  const AuditRow &sink = r.rows[0], &ties = r.rows[1], &mask = r.rows[2];
  EXPECT_EQ(sink.knob.name, "sinkhorn");
  EXPECT_EQ(sink.touched, 4 * 2 * 2 + 1);  // hc_mix and hc_sinkhorn at both sites of 4 layers, hc_head
  EXPECT_GT(sink.factor, 100);
  EXPECT_DOUBLE_EQ(sink.factor, sink.bad.local.rel_l2 / sink.good.local.rel_l2);
  EXPECT_FALSE(sink.bad.ran_full);
  EXPECT_TRUE(ties.selection);
  EXPECT_FALSE(sink.selection);
  EXPECT_DOUBLE_EQ(mask.factor, 1.0);  // finite inputs: identical bits (the sink keeps rows finite)
  // An unknown knob is an input error.
  opt.knobs = {"bogus"};
  EXPECT_THROW(run_audit(s, Policy::preset("fixed"), opt), InputError);
}

TEST_F(Audit, EndToEndAndRunToRun) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"reduction", "topk_ties"};
  const AuditResult r = run_audit(s, Policy::preset("fixed"), opt);
  ASSERT_EQ(r.rows.size(), 2u);
  const AuditRow &red = r.rows[0], &ties = r.rows[1];
  // Run to run: only the order-dependent settings differ between the two seeds.
  ASSERT_TRUE(red.bad.ran_full);
  EXPECT_GT(red.bad.r2r.tensors_differ, 0);
  EXPECT_FALSE(red.bad.r2r.first_differing.empty());
  EXPECT_EQ(red.good.r2r.tensors_differ, 0);
  EXPECT_EQ(red.good.r2r.selection_tokens, 0);
  EXPECT_GT(ties.bad.r2r.selection_tokens, 0);
  EXPECT_EQ(ties.good.r2r.tensors_differ, 0);
  // End to end at the logits: the good side is the base policy's run.
  ASSERT_TRUE(red.good.full.logits.logits.has_value());
  EXPECT_EQ(red.good.full.logits.metrics.rel_l2, ties.good.full.logits.metrics.rel_l2);
  EXPECT_GT(red.bad.full.logits.metrics.rel_l2, 0);
}

TEST_F(Audit, FlippedOnNaiveTheGoodSideIsTheFix) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"qk_accum"};
  opt.full_runs = false;
  const AuditResult r = run_audit(s, Policy::preset("naive"), opt);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.policy, "naive");
  EXPECT_FALSE(r.rows[0].bad.ran_full);
  EXPECT_GT(r.rows[0].factor, 1.0);
}

TEST_F(Audit, CommandPrintsTheTableAndWritesReports) {
  const std::string out = (*dir_ / "rep").string(), txt = (*dir_ / "audit.txt").string();
  ASSERT_EQ(WEXITSTATUS(std::system(fmt::format("{} audit {} --no-full-runs -o {} > {} 2>&1", TDIFF_BIN, args(), out, txt).c_str())), 0);
  const std::string table = read(txt);
  std::istringstream lines(table);
  std::string line;
  int knob_lines = 0;
  while (std::getline(lines, line)) {
    if (line.starts_with("reproduce")) break;
    EXPECT_LE(line.size(), 100u) << line;  // fits 100 columns (the reproduce command aside)
    for (const auto& k : knob_catalog())
      if (line.starts_with(k.name + " ")) ++knob_lines;
  }
  EXPECT_EQ(knob_lines, static_cast<int>(knob_catalog().size()));
  // Progress in a log (stderr is no terminal here): a line per knob, before the table.
  const std::string first = fmt::format("audit: [1/{}] {}: ", knob_catalog().size(), knob_catalog().front().name);
  const auto progress = table.find(first), table_start = table.find("\n" + knob_catalog().front().name + " ");
  ASSERT_NE(progress, std::string::npos) << table;
  EXPECT_LT(progress, table_start) << table;
  // CSV: a header and one row per knob.
  const std::string csv = read(fs::path(out) / "audit.csv");
  EXPECT_TRUE(csv.starts_with("knob,bad,good,touched_stages,selection,local_bad,local_good"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(knob_catalog().size()) + 1);
  // JSON: every row with its per-stage details.
  const auto j = nlohmann::json::parse(read(fs::path(out) / "audit.json"));
  ASSERT_EQ(j["rows"].size(), knob_catalog().size());
  EXPECT_EQ(j["policy"], "fixed");
  EXPECT_FALSE(j["rows"][0]["bad"]["stages"].empty());
  // HTML: self-contained, one details block per knob.
  const std::string html = read(fs::path(out) / "audit.html");
  EXPECT_NE(html.find("<table id=\"audit\""), std::string::npos);
  std::size_t details = 0;
  for (auto p = html.find("<details"); p != std::string::npos; p = html.find("<details", p + 1)) ++details;
  EXPECT_EQ(details, knob_catalog().size());
  EXPECT_EQ(html.find("http"), std::string::npos);  // loads nothing from anywhere
}

TEST_F(Audit, BadArgumentsExitWith2) {
  EXPECT_EQ(sh(fmt::format("{} audit {} --knob bogus --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {} --set bogus=1 --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {} --seed 3 --seed-b 3 --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {}/missing.h5 --no-reports", TDIFF_BIN, dir_->string())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {} --backend hip --no-reports", TDIFF_BIN, args())), 2);
}

}  // namespace
}  // namespace tdiff
