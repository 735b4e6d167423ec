// `tdiff info --ops` prints the operator table with each kind's coverage.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
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

namespace tdiff {
namespace {

// `tdiff info --dump-format`: docs/reference/dump-format.md ends with its output, so the
// table users read cannot drift from the contract; every stage output of the tiny preset has
// its row, and the selections say they are ids.
TEST_F(InfoOps, DumpFormatDocIsTheContractsTable) {
  const testing::CliResult r = run("info --dump-format");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(std::string(TDIFF_SOURCE_DIR) + "/docs/reference/dump-format.md");
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(doc.size(), r.out.size());
  EXPECT_EQ(doc.substr(doc.size() - r.out.size()), r.out) << "regenerate: see the page's last paragraph";
  EXPECT_NE(r.out.find("| `Lxx.moe.select/idx` | `[N,K]` | integer ids | moe_select | every |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| `Lxx.attn.idx.topk/sel` | `[B,S,k]` | integer ids | idx_topk | CSA |"), std::string::npos);
  EXPECT_EQ(run("info --dump-format --ops").code, 2);
}

}  // namespace
}  // namespace tdiff
