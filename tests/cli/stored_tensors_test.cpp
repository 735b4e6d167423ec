// Every tensor tdiff reads from a case or a dump is checked against the tensor contract
// (model/tensor_contract.h) before use, through the binary: a tampered /reference, a saved
// run, a floor or a dump is exit 2 with one line naming the file, the dataset and what was
// expected; never a crash, an abort, a read past a tensor's end, or a wrong expert replayed.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "case_tamper.h"
#include "cli_support.h"
#include "casefile/h5io.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;

// A tiny case of 2 rows of 48 tokens (one padded): N = 96 token rows, 12 CSA entries (the
// indexer keeps k = 4), 6 HCA entries; E = 8 experts, K = 2 per token.
class StoredTensors : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 44 --seed 5 --pad-to 48 -o '{}'", path("m"),
                              c()))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", c())).code, 0);
  }
  std::string c() const { return path("c.h5"); }
  Tensor ref(const std::string& key) const { return h5_read(c(), "/reference/" + key); }
  void tamper_ref(const std::string& key, const Tensor& t) const { testing::tamper(c(), "/reference/" + key, t); }
  // `ref(key)` with element `i` set to `v`.
  Tensor with_value(const std::string& key, std::int64_t i, std::int64_t v) const {
    Tensor t = ref(key);
    t.data<std::int64_t>()[i] = v;
    return t;
  }

  // Exit 2 and one error line, the last, that names the file and the dataset and says `says`
  // (progress lines may come first: a selection's ids are checked when a run reaches it).
  void expect_refused(const std::string& args, const std::string& file, const std::string& dataset,
                      const std::string& says) const {
    SCOPED_TRACE(args);
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    const std::string head = fmt::format("tdiff: error: {}: dataset '{}' ", file, dataset);
    const auto at = r.err.find(head);
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_TRUE(at == 0 || r.err[at - 1] == '\n') << r.err;
    EXPECT_EQ(r.err.find('\n', at), r.err.size() - 1) << "the error is the last line: " << r.err;
    EXPECT_EQ(r.err.find("error"), at + 7) << "one error: " << r.err;
    EXPECT_NE(r.err.find(says, at), std::string::npos) << r.err;
  }
  std::string run_args(const std::string& more = "") const {
    return fmt::format("run '{}' --no-record --no-reports{}", c(), more);
  }
  std::string bisect_args() const { return fmt::format("bisect '{}' --policy naive -o '{}'", c(), path("bisect")); }
};

TEST_F(StoredTensors, ASelectionOfAnotherShapeIsRefusedByRunAndBisect) {
  tamper_ref("L01.moe.select/idx", Tensor(DType::i64, {3, 3}));
  const std::string d = "/reference/L01.moe.select/idx", says = "is i64 [3,3], expected i64 [N,K] = [96,2]";
  expect_refused(run_args(), c(), d, says);
  expect_refused(bisect_args(), c(), d, says);
  EXPECT_FALSE(fs::exists(path("bisect")));
}

TEST_F(StoredTensors, AnAttentionInputOfAnotherDtypeIsRefusedByStatsAndRun) {
  tamper_ref("L00.attn.q_rope/q", ref("L00.attn.q_rope/q").to(DType::f32));
  const std::string d = "/reference/L00.attn.q_rope/q", says = "is f32 [2,48,4,32], expected f64 [B,S,H,d] = [2,48,4,32]";
  expect_refused(fmt::format("stats '{}'", c()), c(), d, says);
  expect_refused(run_args(" --stats"), c(), d, says);
}

TEST_F(StoredTensors, ATensorOfAnotherShapeIsNeverReadPastItsEnd) {
  tamper_ref("L00.attn.q_rope/q", Tensor(DType::f64, {3, 3}));
  expect_refused(fmt::format("stats '{}'", c()), c(), "/reference/L00.attn.q_rope/q",
                 "is f64 [3,3], expected f64 [B,S,H,d] = [2,48,4,32]");
}

TEST_F(StoredTensors, SelectionsOutOfRangeAreRefusedBeforeTheyAreReplayed) {
  const std::string sel = "L01.moe.select/idx", topk = "L01.attn.idx.topk/sel";
  const Tensor idx = ref(sel);
  tamper_ref(sel, with_value(sel, 11, 99));
  expect_refused(run_args(" --selections replay"), c(), "/reference/" + sel, "holds 99 at [5,1], expected expert ids in [0,8)");
  tamper_ref(sel, with_value(sel, 0, -1));
  expect_refused(run_args(" --selections replay"), c(), "/reference/" + sel, "holds -1 at [0,0], expected expert ids in [0,8)");
  expect_refused(bisect_args(), c(), "/reference/" + sel, "holds -1 at [0,0], expected expert ids in [0,8)");
  tamper_ref(sel, idx);
  tamper_ref(topk, with_value(topk, 4 * 30 + 2, 1000000000));
  const std::string says = "holds 1000000000 at [0,30,2], expected entry ids in [-1,12) (-1: none)";
  expect_refused(run_args(" --selections replay"), c(), "/reference/" + topk, says);
  expect_refused(bisect_args(), c(), "/reference/" + topk, says);
}

TEST_F(StoredTensors, ASelectionOfAnotherDtypeIsAnInputError) {
  tamper_ref("L01.moe.select/idx", ref("L01.moe.select/idx").to(DType::f64));
  expect_refused(run_args(), c(), "/reference/L01.moe.select/idx", "is f64 [96,2], expected i64 [N,K] = [96,2]");
  tamper_ref("L01.moe.select/idx", ref("L01.moe.select/idx").to(DType::i32));
  expect_refused(run_args(), c(), "/reference/L01.moe.select/idx", "is i32 [96,2], expected i64 [N,K] = [96,2]");
}

// A saved run's tensors, and a saved run given as compare's noise floor, are held to the
// contract too (any float or integer width: what a backend stores; the exact shape).
TEST_F(StoredTensors, CompareRefusesATamperedSavedRunAndFloor) {
  for (const char* id : {"s1", "s2"})
    ASSERT_EQ(run(fmt::format("run '{}' --save --run-id {} --no-reports", c(), id)).code, 0);
  const std::string compare = fmt::format("compare '{0}' '{0}' --group-b /runs/s2 --no-reports", c());
  ASSERT_EQ(run(compare).code, 0);
  testing::tamper(c(), "/runs/s1/L00.attn.q_rope/q", Tensor(DType::f32, {3, 3}));
  const std::string says = "is f32 [3,3], expected floats [B,S,H,d] = [2,48,4,32]";
  expect_refused(fmt::format("compare '{0}' '{0}' --group-b /runs/s1 --no-reports", c()), c(), "/runs/s1/L00.attn.q_rope/q",
                 says);
  expect_refused(fmt::format("{} --floor '{}' --group-floor /runs/s1", compare, c()), c(), "/runs/s1/L00.attn.q_rope/q",
                 says);
  Tensor idx = h5_read(c(), "/runs/s2/L02.moe.select/idx");
  idx.data<std::int64_t>()[3] = 8;
  testing::tamper(c(), "/runs/s2/L02.moe.select/idx", idx);
  expect_refused(compare, c(), "/runs/s2/L02.moe.select/idx", "holds 8 at [1,1], expected expert ids in [0,8)");
}

// A dump's selection out of range is refused when it is read, before any row is judged.
TEST_F(StoredTensors, ADumpWithASelectionOutOfRangeIsRefused) {
  const Tensor idx = with_value("L01.moe.select/idx", 7, 8);
  const Tensor e = ref("embed/e");
  Tap tap(path("d.h5"));
  tap.write_raw("embed/e", "f64", e.raw(), e.shape());
  tap.write_raw("L01.moe.select/idx", "i64", idx.raw(), idx.shape());
  tap.close();
  expect_refused(run_args(fmt::format(" --candidate-dump '{}'", path("d.h5"))), path("d.h5"), "/L01.moe.select/idx",
                 "holds 8 at [3,1], expected expert ids in [0,8)");
}

// `run --candidate-dump` refuses a dump recorded for another case, as `ci` does: by the inputs
// where the recorded case is at hand, by the file name where it is not.
TEST_F(StoredTensors, ADumpRecordedForAnotherCaseIsRefused) {
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 44 --seed 6 --pad-to 48 -o '{}'", path("m"),
                            path("other.h5")))
                .code,
            0);
  const Tensor e = ref("embed/e");
  {
    Tap tap(path("d.h5"));
    tap.write_raw("embed/e", "f64", e.raw(), e.shape());
    tap.close();
  }
  const std::string judge = run_args(fmt::format(" --candidate-dump '{}'", path("d.h5")));
  auto written_on = [&](const std::string& on) { testing::tamper(path("d.h5"), "/", Tensor(), "case", on); };
  written_on(path("other.h5"));
  CliResult r = run(judge);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(fmt::format("{}: written on the case file {}, whose inputs (token ids and mask) are not those of {}",
                                   path("d.h5"), path("other.h5"), c())),
            std::string::npos)
      << r.err;
  // A copy of this case has its inputs: judged.
  fs::copy_file(c(), path("copy.h5"));
  written_on(path("copy.h5"));
  r = run(judge);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // Not at hand: the file names must agree.
  written_on("/elsewhere/c.h5");
  EXPECT_EQ(run(judge).code, 0);
  written_on("/elsewhere/another.h5");
  r = run(judge);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("written on the case file /elsewhere/another.h5, not on " + c()), std::string::npos) << r.err;
}

// The contract as `tdiff info CASE --stages --json` prints it, and shapes in the stage table.
TEST_F(StoredTensors, InfoPrintsTheContract) {
  CliResult r = run(fmt::format("info '{}' --stages --json", c()));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto all = nlohmann::json::parse(r.out);
  ASSERT_EQ(all.size(), h5_list_datasets(c(), "/reference").size());
  bool seen = false;
  for (const auto& t : all) {
    EXPECT_EQ(t["shape"].get<Shape>(), h5_read(c(), "/reference/" + t["key"].get<std::string>()).shape()) << t.dump();
    if (t["key"] != "L01.attn.idx.topk/sel") continue;
    seen = true;
    EXPECT_EQ(t["shape"], nlohmann::json::parse("[2,48,4]"));
    EXPECT_EQ(t["axes"], nlohmann::json::parse(R"(["B","S","k"])"));
    EXPECT_EQ(t["dtype"], "i64");
    EXPECT_EQ(t["range"], nlohmann::json::parse("[-1,12]"));
  }
  EXPECT_TRUE(seen);
  r = run(fmt::format("info '{}' --stages 'L02.moe.*' --json", c()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 7u);  // router logit, score; select; weights; experts; shared; out
  r = run(fmt::format("info '{}' --stages 'L00.attn.q_*'", c()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("q[2,48,4,32]"), std::string::npos) << r.out;
  r = run(fmt::format("info --model '{}' --stages 'L00.attn.q_*'", path("m")));
  EXPECT_NE(r.out.find("q[B,S,H,d]"), std::string::npos) << r.out;
  EXPECT_EQ(run(fmt::format("info --model '{}' --stages --json", path("m"))).code, 2);
}

}  // namespace
}  // namespace tdiff
