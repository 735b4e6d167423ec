// The run id rule (src/app/envelope.h): a run id names a report folder and case groups, so only
// a plain name passes (issue 39, item 3, defect c).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/envelope.h"
#include "base/error.h"

namespace tdiff {
namespace {

TEST(Envelope, RunIdsArePlainNames) {
  for (const std::string& id :
       std::vector<std::string>{"r1", "run-20261203T101010Z-0a1b", "a.b_c-d", "9", std::string(128, 'x')})
    EXPECT_TRUE(app::is_safe_run_id(id)) << id;
  for (const std::string& id : std::vector<std::string>{"", "..", ".", "../../esc", "a/b", ".hidden", "-flag", "a..b",
                                                        "a b", "a\x1b", "\xc3\xa9", std::string(129, 'x')})
    EXPECT_FALSE(app::is_safe_run_id(id)) << id;
  EXPECT_EQ(app::run_id_for("r1", "run"), "r1");
  EXPECT_EQ(app::run_id_for("", "run").rfind("run-", 0), 0u);
  try {
    app::run_id_for("a/b", "run");
    ADD_FAILURE() << "a/b accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--run-id \"a/b\" is not a plain name", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace tdiff
