// The ci summary's JUnit file and index page (report/ci_index.h): one entry per case, names escaped.
#include <gtest/gtest.h>

#include "report/ci_index.h"

namespace tdiff {
namespace {

TEST(CiIndex, JunitAndIndexNameEveryCase) {
  CiSummary s;
  s.suite = "t";
  s.command = "tdiff ci cases/t";
  CiRow a;
  a.name = "a<b";
  a.report = "a/report.html";
  CiRow b;
  b.name = "b";
  b.verdict = Verdict::fail;
  b.reason = "lm_head/logits: cosine 0.9 < 0.99";
  b.deterministic = false;
  b.runs = 2;
  b.determinism_report = "b/determinism/report.html";
  s.rows = {a, b};
  EXPECT_EQ(s.verdict(), Verdict::fail);
  const std::string j = render_ci_junit(s);
  EXPECT_NE(j.find("name=\"a&lt;b\""), std::string::npos);
  EXPECT_NE(j.find("<failure message=\"lm_head/logits: cosine 0.9 &lt; 0.99\""), std::string::npos) << j;
  const std::string h = render_ci_index(s);
  EXPECT_NE(h.find("href=\"b/determinism/report.html\""), std::string::npos);
  EXPECT_NE(h.find("a&lt;b"), std::string::npos);
  EXPECT_NE(render_ci_table(s, false).find("NO (2 runs)"), std::string::npos);
}
}  // namespace
}  // namespace tdiff
