// report.html: self-contained, and loads in headless Chromium with no console message
// (skipped where Debian's chromium is not installed).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "diff/compare.h"
#include "report/report.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

Tensor wave(Shape shape, double noise) {
  Tensor t(DType::f64, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = std::sin(0.21 * static_cast<double>(i)) + 0.05 + noise * std::cos(5.0 * i);
  return t;
}

// A small model-shaped run: three layers, a WARN, a FAIL, a NaN, logits, a routing flip.
CompareResult sample_run() {
  NamedTensors ref, cand;
  auto add = [&](const std::string& key, Tensor r, Tensor c) {
    ref[key] = std::move(r);
    cand[key] = std::move(c);
  };
  add("embed/e", wave({4, 16}, 0), wave({4, 16}, 1e-6));
  for (int l = 0; l < 3; ++l)
    for (const char* s : {"attn_norm/h", "attn.q_a/out", "attn.core/o", "moe.experts/routed", "hc_ffn.post/X"}) {
      const double noise = l == 1 && std::string(s) == "attn.core/o" ? 0.03 : l == 2 ? 0.2 : 1e-4 * (l + 1);
      add(fmt::format("L{:02d}.{}", l, s), wave({2, 4, 16}, 0), wave({2, 4, 16}, noise));
    }
  Tensor idx(DType::i64, {8, 2}), idx_c(DType::i64, {8, 2});
  for (std::int64_t i = 0; i < 16; ++i) idx.data<std::int64_t>()[i] = idx_c.data<std::int64_t>()[i] = i % 5;
  idx_c.data<std::int64_t>()[3] = 4;
  add("L02.moe.select/idx", idx, idx_c);
  Tensor nan = wave({2, 8}, 0);
  nan.data<double>()[3] = std::numeric_limits<double>::quiet_NaN();
  add("final.norm/out", wave({2, 8}, 0), nan);
  add("lm_head/logits", wave({1, 6, 64}, 0), wave({1, 6, 64}, 0.4));
  ref["L02.only_ref/x"] = wave({2}, 0);
  CompareResult r = compare_maps(ref, cand);
  judge(r, ThresholdPolicy{});
  return r;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ReportHtml : public ::testing::Test {
 protected:
  fs::path dir_;
  std::string html_;
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tdiff_html_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    RunInfo info;
    info.case_name = "tiny";
    info.run_id = "run-7";
    info.command = "tdiff compare /data/case.h5 /data/dump.h5 --group-a /reference --group-b /";
    info.env = {{"tdiff_version", "0.1.0"}, {"cpu_model", "Test CPU <fast>"}};
    html_ = render_html(sample_run(), info);
    std::ofstream(dir_ / "report.html") << html_;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string chromium() {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const std::string cmd = std::string("command -v ") + name + " > /dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0) return name;
    }
    return "";
  }
  // Loads `page` headless; returns the exit status; stderr (console messages) in `log`.
  int load(const std::string& browser, const fs::path& page, const std::string& mode, std::string* log) {
    const fs::path err = dir_ / "chromium.err";
    const std::string cmd = fmt::format(
        "timeout 90 {} --headless --no-sandbox --disable-gpu --disable-background-networking "
        "--disable-component-update --disable-sync --no-first-run --user-data-dir={} --enable-logging=stderr --v=0 "
        "--window-size=1280,900 {} file://{} > {} 2> {}",
        browser, (dir_ / "profile").string(), mode, page.string(), (dir_ / "chromium.out").string(), err.string());
    const int status = std::system(cmd.c_str());
    *log = read(err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  static bool has_console_message(const std::string& log) { return log.find(":CONSOLE") != std::string::npos; }
};

TEST_F(ReportHtml, SelfContained) {
  EXPECT_EQ(html_.find("<link"), std::string::npos);
  EXPECT_EQ(html_.find(" src="), std::string::npos);
  EXPECT_EQ(html_.find("url("), std::string::npos);
  EXPECT_EQ(html_.find("@import"), std::string::npos);
  EXPECT_EQ(html_.find("https://"), std::string::npos);
  // The only "http://" is the SVG namespace name, which is never fetched.
  std::string rest = html_;
  for (auto p = rest.find("http://www.w3.org/2000/svg"); p != std::string::npos; p = rest.find("http://www.w3.org/2000/svg"))
    rest.erase(p, 26);
  EXPECT_EQ(rest.find("http://"), std::string::npos);
  EXPECT_NE(html_.find("<svg"), std::string::npos);
  EXPECT_NE(html_.find("FAIL below cosine 0.99"), std::string::npos);
  EXPECT_NE(html_.find("<th>max_abs</th><th>err_rel</th>"), std::string::npos);
  EXPECT_NE(html_.find("<th>expected</th><th>x</th><th>where</th>"), std::string::npos);
  EXPECT_NE(html_.find("selection agreement per selection stage"), std::string::npos);
  EXPECT_NE(html_.find("1 - cosine per stage, log10 scale"), std::string::npos);
  EXPECT_NE(html_.find("class=\"marker\""), std::string::npos);  // the first divergence
  EXPECT_NE(html_.find("--group-a /reference"), std::string::npos);
  EXPECT_NE(html_.find("Test CPU &lt;fast&gt;"), std::string::npos);
  EXPECT_NE(html_.find("Worst tokens"), std::string::npos);
  EXPECT_NE(html_.find("L02.only_ref/x"), std::string::npos);
}

TEST(ReportHtmlThresholds, PlotsDrawEachStagesOwnLines) {
  // A rule for L01's stages: judge() records it on their rows, and the plot draws its line
  // over those stages only, beside the default line elsewhere.
  CompareResult r = sample_run();
  ThresholdPolicy p;
  p.rules.push_back({{"L01.*"}, {{"cosine_fail", 0.9}, {"max_abs_fail", 0.5}}, "test"});
  judge(r, p);
  for (const auto& row : r.rows)
    EXPECT_EQ(row.thresholds.cosine_fail, row.stage.starts_with("L01.") ? 0.9 : 0.99) << row.key();
  EXPECT_EQ(r.thresholds.cosine_fail, 0.99);  // the defaults
  RunInfo info;
  const std::string html = render_html(r, info);
  EXPECT_NE(html.find("FAIL below cosine 0.99"), std::string::npos);
  EXPECT_NE(html.find("FAIL below cosine 0.9<"), std::string::npos);
  EXPECT_NE(html.find("FAIL at 0.5<"), std::string::npos);
  EXPECT_NE(html.find("FAIL at 0.1<"), std::string::npos);
  std::size_t lines = 0;
  for (auto at = html.find("class=\"thr fail\""); at != std::string::npos; at = html.find("class=\"thr fail\"", at + 1))
    ++lines;
  // Per value plot: before L01, L01, after L01; and the selection plot's one line.
  EXPECT_EQ(lines, 7u);
}

TEST_F(ReportHtml, LoadsInHeadlessChromiumWithoutConsoleErrors) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it)";
  std::string log;
  const fs::path png = dir_ / "report.png";
  ASSERT_EQ(load(browser, dir_ / "report.html", "--screenshot=" + png.string(), &log), 0) << log;
  EXPECT_FALSE(has_console_message(log)) << log;
  ASSERT_TRUE(fs::is_regular_file(png)) << log;
  EXPECT_GT(fs::file_size(png), 20000u);
  EXPECT_EQ(read(png).substr(1, 3), "PNG");

  // The check itself works: a page with a script error is caught.
  std::ofstream(dir_ / "broken.html") << "<!DOCTYPE html><p>x</p><script>no_such_function();</script>";
  ASSERT_EQ(load(browser, dir_ / "broken.html", "--screenshot=" + (dir_ / "broken.png").string(), &log), 0) << log;
  EXPECT_TRUE(has_console_message(log)) << log;
}

TEST_F(ReportHtml, TableSortsInTheBrowser) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it)";
  // Click the cosine header, then put the first row's id into the title for --dump-dom.
  std::string page = html_;
  page.insert(page.rfind("</body>"),
              "<script>document.querySelectorAll('#stages th')[3].click();"
              "document.title = 'first:' + document.querySelector('#stages tbody tr:not(.grp)').cells[1].textContent;"
              "</script>");
  std::ofstream(dir_ / "sort.html") << page;
  std::string log;
  ASSERT_EQ(load(browser, dir_ / "sort.html", "--dump-dom", &log), 0) << log;
  EXPECT_FALSE(has_console_message(log)) << log;
  // Lowest cosine first: the logits, with the largest noise.
  const std::string dom = read(dir_ / "chromium.out");
  const auto t = dom.find("<title>first:");
  ASSERT_NE(t, std::string::npos) << dom.substr(0, 400);
  EXPECT_EQ(dom.compare(t + 13, 7, "lm_head"), 0) << dom.substr(t, 60);
}

}  // namespace
}  // namespace tdiff
