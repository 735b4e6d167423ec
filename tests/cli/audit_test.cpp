// `tdiff audit` through the binary: the table fits 100 columns with progress before it, the
// CSV, JSON and HTML reports, and bad arguments exit 2 with one line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "audit_case.h"
#include "checks/audit.h"
#include "exec/backend_registry.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::knob_line;

class Audit : public testing::AuditCase {
 protected:
  static int sh(const std::string& cmd) { return WEXITSTATUS(std::system((cmd + " > /dev/null 2>&1").c_str())); }
  // Runs `cmd`; its stderr in `err`.
  static int sh_err(const std::string& cmd, std::string& err) {
    const fs::path e = *dir_ / "stderr.txt";
    const int code = WEXITSTATUS(std::system(fmt::format("{} > /dev/null 2> {}", cmd, e.string()).c_str()));
    err = read(e);
    return code;
  }
};

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
  EXPECT_NE(table.find(fmt::format("tdiff audit {}: emu, seeds ", fs::path(case_->path).filename().string())),
            std::string::npos) << table;
  EXPECT_NE(knob_line(table, "pv_accum").find(" ~8x"), std::string::npos) << table;
  // Progress in a log (stderr is no terminal here): a line per knob, before the table.
  const std::string first = fmt::format("audit: [1/{}] {}: ", knob_catalog().size(), knob_catalog().front().name);
  const auto progress = table.find(first), table_start = table.find("\n" + knob_catalog().front().name + " ");
  ASSERT_NE(progress, std::string::npos) << table;
  EXPECT_LT(progress, table_start) << table;
  // CSV: a header and one row per knob.
  const std::string csv = read(fs::path(out) / "audit.csv");
  EXPECT_TRUE(csv.starts_with("knob,bad,good,touched_stages,selection,local_bad,local_good"));
  EXPECT_NE(csv.find("\nsoftmax_stats,"), std::string::npos);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(knob_catalog().size()) + 1);
  // JSON: every row with its per-stage details.
  const auto j = nlohmann::json::parse(read(fs::path(out) / "audit.json"));
  ASSERT_EQ(j["rows"].size(), knob_catalog().size());
  EXPECT_EQ(j["policy"], "fixed");
  EXPECT_EQ(j["backend"], "emu");
  EXPECT_EQ(j["env"]["backend"], "emu");
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
  // --hip-gemm is hip's.
  EXPECT_EQ(sh(fmt::format("{} audit {} --hip-gemm vector --no-full-runs --knob qk_accum --no-reports", TDIFF_BIN, args())), 2);
}

TEST_F(Audit, HipOnABuildWithoutItExitsWith2) {
  for (const auto& e : backend_registry())
    if (e.name == "hip" && e.built) GTEST_SKIP() << "this tdiff has hip";
  std::string err;
  EXPECT_EQ(sh_err(fmt::format("{} audit {} --backend hip --hip-gemm vector --no-reports", TDIFF_BIN, args()), err), 2);
  // One line naming the backend and how to build it (backend_entry's message).
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("backend 'hip' is not built into this tdiff (configure with -DTDIFF_HIP="), std::string::npos) << err;
}

}  // namespace
}  // namespace tdiff
