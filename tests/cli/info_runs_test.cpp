// `tdiff info CASE` shows the newest environment records, saved runs and runs of the run history
// (--runs N, default 5; all), and says how many older ones it left out.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "cli_support.h"

namespace tdiff {
namespace {

class InfoRuns : public testing::CliTest {
 protected:
  static std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
};

TEST_F(InfoRuns, ShowsTheNewestAndCountsTheRest) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 2 -o '{}'", path("m"), path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {
    ids.push_back(fmt::format("run-2026120{}T000000Z-000{}", i + 1, i));  // the later id, the later run
    ASSERT_EQ(run(fmt::format("run '{}' --save --run-id {} --no-reports", path("c.h5"), ids.back())).code, 0);
  }
  // The case's own environment record (golden's), 7 saved runs and 7 runs in the history: the
  // newest 5 of each list shown, the newest last.
  const std::string shown = run(fmt::format("info '{}'", path("c.h5"))).out;
  EXPECT_EQ(count(shown, "  backend "), 1u) << shown;
  EXPECT_NE(shown.find("2 older saved runs not shown"), std::string::npos) << shown;
  EXPECT_NE(shown.find("7 runs in "), std::string::npos) << shown;
  EXPECT_NE(shown.find("; the newest 5 (tdiff history "), std::string::npos) << shown;
  EXPECT_EQ(shown.find(ids[1] + "  "), std::string::npos) << "an old run is left out: " << shown;
  EXPECT_LT(shown.find(ids[5] + "  "), shown.find(ids[6] + "  ")) << shown;
  const std::string all = run(fmt::format("info '{}' --runs all", path("c.h5"))).out;
  EXPECT_EQ(count(all, "  run         PASS"), 7u) << all;
  EXPECT_EQ(all.find("not shown"), std::string::npos) << all;
  EXPECT_EQ(all.find("the newest"), std::string::npos) << all;
  EXPECT_EQ(count(run(fmt::format("info '{}' --runs 1", path("c.h5"))).out, "  run         PASS"), 1u);
  for (const char* bad : {"0", "-1", "x", "99999999999"}) {
    const auto r = run(fmt::format("info '{}' --runs {}", path("c.h5"), bad));
    EXPECT_EQ(r.code, 2) << bad << r.out << r.err;
  }
}

}  // namespace
}  // namespace tdiff
