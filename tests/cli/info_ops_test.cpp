// `tdiff info --ops` prints the operator table with each kind's coverage.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli_support.h"
#include "model/op_table.h"
#include "exec/backend_registry.h"

namespace tdiff {
namespace {

// `tdiff info --ops`: a row per kind with its family, coverage by every backend of the
// registry (hip "not built" in a CPU build) and its GPU test, the untested kinds named.
class InfoOps : public testing::CliTest {};

TEST_F(InfoOps, PrintsEveryKindWithItsCoverage) {
  const testing::CliResult r = run("info --ops");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_NE(line.find("refcpu"), std::string::npos) << line;
  EXPECT_NE(line.find("GPU test"), std::string::npos) << line;
  std::size_t rows = 0;
  std::vector<std::string> untested;
  while (std::getline(lines, line) && rows < kOpKindCount) {
    const OpInfo& op = op_table()[rows++];
    SCOPED_TRACE(line);
    EXPECT_TRUE(line.starts_with(std::string(op.name) + " ")) << op.name;
    EXPECT_NE(line.find(std::string(" ") + op_family_name(op.family) + " "), std::string::npos);
    if (*op.gpu_test) {
      EXPECT_TRUE(line.ends_with(std::string("tests/gpu/") + op.gpu_test));
    } else {
      EXPECT_TRUE(line.ends_with(" missing"));
      untested.push_back(op.name);
    }
  }
  EXPECT_EQ(rows, kOpKindCount);
  ASSERT_FALSE(untested.empty());  // idx_weights and cmp_mask today
  EXPECT_NE(line.find("missing: " + untested.front()), std::string::npos) << line;
  for (const BackendEntry& e : backend_registry())
    if (!e.built) EXPECT_NE(r.out.find("not built"), std::string::npos) << e.name;
}

}  // namespace
}  // namespace tdiff
