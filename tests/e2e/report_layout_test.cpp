// Every HTML page tdiff writes, on real runs of a tiny case, loaded in headless Chromium at
// 1400 px: nothing may reach past the window's right edge (a table wider than the page cuts
// its right-hand columns off), and a screenshot at that width is taken. Skipped, with the
// reason, where Debian's chromium is not installed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_support.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::slurp;

constexpr int kWidth = 1400;

// Writes into the page's title the document's scroll width and the right edge of the element
// reaching furthest right (with its tag, class and id), for --dump-dom to carry out.
constexpr const char* kMeasure = R"JS(<script>(function () {
  var right = 0, worst = '';
  document.querySelectorAll('body *').forEach(function (e) {
    var r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > right) {
      right = r.right;
      worst = e.tagName + (e.id ? '#' + e.id : '') + (typeof e.className === 'string' && e.className ? '.' + e.className : '');
    }
  });
  document.title = 'layout:' + document.documentElement.scrollWidth + ':' + Math.ceil(right) + ':' + worst + ':end';
})();</script>)JS";

class ReportLayout : public testing::CliTest {
 protected:
  static std::string chromium() {
    for (const char* name : {"chromium", "chromium-browser"})
      if (std::system(fmt::format("command -v {} > /dev/null 2>&1", name).c_str()) == 0) return name;
    return "";
  }
  // Chromium at kWidth px on `page` with `mode` (--dump-dom, --screenshot=...); its stdout.
  std::string load(const std::string& browser, const fs::path& page, const std::string& mode) const {
    const std::string out = path("chromium.out");
    const std::string cmd = fmt::format(
        "timeout 90 {} --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update "
        "--disable-sync --no-first-run --hide-scrollbars --user-data-dir={} --window-size={},1000 {} file://{} > {} 2> {}",
        browser, path("profile"), kWidth, mode, page.string(), out, path("chromium.err"));
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << slurp(path("chromium.err"));
    return slurp(out);
  }
  // The page's widest extent in px (scroll width and the furthest right edge) and what reaches it.
  struct Extent {
    int scroll = -1, right = -1;
    std::string worst;
  };
  Extent measure(const std::string& browser, const fs::path& page) const {
    std::string html = slurp(page.string());
    html.insert(html.rfind("</body>"), kMeasure);
    const fs::path probe = dir_ / ("probe-" + page.filename().string());
    std::ofstream(probe) << html;
    const std::string dom = load(browser, probe, "--dump-dom");
    const auto t = dom.find("<title>layout:");
    Extent e;
    if (t == std::string::npos) return e;
    std::sscanf(dom.c_str() + t + 14, "%d:%d", &e.scroll, &e.right);
    const auto a = dom.find(':', dom.find(':', t + 14) + 1), b = dom.find(":end", a);
    e.worst = dom.substr(a + 1, b - a - 1);
    return e;
  }
  // Checks that `page` fits kWidth px and leaves its screenshot beside it.
  void check_fits(const std::string& browser, const fs::path& page) const {
    ASSERT_TRUE(fs::is_regular_file(page)) << page;
    const Extent e = measure(browser, page);
    ASSERT_GT(e.scroll, 0) << page << ": no measurement came back";
    EXPECT_LE(e.scroll, kWidth) << page << " scrolls sideways; widest element " << e.worst;
    EXPECT_LE(e.right, kWidth) << page << ": " << e.worst << " reaches " << e.right << " px";
    const fs::path png = page.parent_path() / (page.stem().string() + "-1400.png");
    load(browser, page, "--screenshot=" + png.string());
    EXPECT_GT(fs::exists(png) ? fs::file_size(png) : 0, 10000u) << png;
  }
};

TEST_F(ReportLayout, EveryPageFitsFourteenHundredPixels) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it): page layout unchecked";
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  const std::string c = path("c.h5");
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 40 --seed 3 -o '{}'", path("m"), c)).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  // A run that FAILs (first divergence, selection and heatmap cells in every colour) and one that passes.
  EXPECT_EQ(run(fmt::format("run '{}' --policy naive -o '{}'", c, path("naive"))).code, 1);
  EXPECT_EQ(run(fmt::format("run '{}' --policy fixed -o '{}'", c, path("fixed"))).code, 0);
  // With full runs: the audit table at its widest (every column, the paper's factors among them).
  EXPECT_EQ(run(fmt::format("audit '{}' --knob qk_accum --knob topk_ties --knob routing_bias -o '{}'", c,
                            path("audit")))
                .code,
            0);
  EXPECT_EQ(run(fmt::format("bisect '{}' --policy fp32 --floor fp32 --set 'L01.attn.q_a:matmul_input=fp8' -o '{}'", c,
                            path("bisect")))
                .code,
            1);
  for (const auto* page : {"naive/report.html", "fixed/report.html", "audit/audit.html", "bisect/bisect.html",
                           "bisect/report.html"})
    check_fits(browser, dir_ / page);
}

// The ci index and its case pages, on the shipped golden set (its cache reused when built).
TEST_F(ReportLayout, CiPagesFitFourteenHundredPixels) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it): page layout unchecked";
  const std::string set = std::string(TDIFF_SOURCE_DIR) + "/cases/tiny";
  ASSERT_EQ(run(fmt::format("ci '{}' --cases 'short-*' -o '{}'", set, path("ci"))).code, 0);
  check_fits(browser, dir_ / "ci/index.html");
  check_fits(browser, dir_ / "ci/short-right/report.html");
}

// The measurement itself: a page with a table wider than the window is caught.
TEST_F(ReportLayout, AWidePageIsCaught) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it): page layout unchecked";
  std::ofstream(path("wide.html")) << "<!DOCTYPE html><html><head><title>w</title></head><body><table><tr><td "
                                      "style=\"white-space:nowrap\">"
                                   << std::string(400, 'x') << " " << std::string(400, 'y')
                                   << "</td></tr></table></body></html>";
  const Extent e = measure(browser, dir_ / "wide.html");
  EXPECT_GT(e.scroll, kWidth);
  EXPECT_GT(e.right, kWidth);
  EXPECT_TRUE(e.worst.starts_with("TABLE") || e.worst.starts_with("TD")) << e.worst;
}

}  // namespace
}  // namespace tdiff
