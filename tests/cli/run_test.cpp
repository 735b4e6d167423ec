// tdiff golden and tdiff run through the binary: the whole path on the tiny model, exit
// codes, one-line errors, and nothing half-written on bad input.
#include <sstream>

#include "cli_support.h"
#include "casefile/h5io.h"
#include "numerics/policy.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::count_lines;

class CliRun : public testing::CliTest {
 protected:
  std::string line_;
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 44 --seed 5 --pad-to 48 -o '{}'", path("m"),
                              path("c.h5")))
                  .code,
              0);
  }
};

TEST_F(CliRun, GoldenThenRunPassesUnderFp32AndFailsUnderNaive) {
  const CliResult g = run(fmt::format("golden '{}'", path("c.h5")));
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(run(fmt::format("info '{}'", path("c.h5"))).out.find("reference 153 of 153 stages"), std::string::npos);

  const CliResult fp32 = run(fmt::format("run '{}' --policy fp32 -o '{}'", path("c.h5"), path("r32")));
  EXPECT_EQ(fp32.code, 0) << fp32.out << fp32.err;
  EXPECT_NE(fp32.out.find("first divergence: none"), std::string::npos);
  for (const char* f : {"report.html", "report.csv", "report.json", "junit.xml"})
    EXPECT_TRUE(std::filesystem::exists(path(std::string("r32/") + f))) << f;

  const CliResult naive = run(fmt::format("run '{}' --policy naive --no-reports", path("c.h5")));
  EXPECT_EQ(naive.code, 1) << naive.err;
  // The first stage naive breaks beyond what its fp16 formats explain: RoPE tables from fp16 angles.
  EXPECT_NE(naive.out.find("first divergence: rope.main"), std::string::npos) << naive.out;
  // Both runs are recorded in the run history, which info lists.
  const std::string info = run(fmt::format("info '{}'", path("c.h5"))).out;
  EXPECT_NE(info.find(" emu fp32"), std::string::npos) << info;
  EXPECT_NE(info.find("emu naive  first: rope.main"), std::string::npos) << info;
}

// golden --verify recomputes each stage from the stored inputs: this build's own reference is
// reproduced bit for bit; an edited stored tensor is named (exit 1); the case is not changed.
TEST_F(CliRun, GoldenVerifyNamesAStoredTensorThatDiffers) {
  const std::string c = path("c.h5");
  CliResult none = run(fmt::format("golden '{}' --verify", c));  // nothing stored yet
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no reference to verify"), std::string::npos) << none.err;
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  CliResult v = run(fmt::format("golden '{}' --verify", c));
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.err.find("181 bit-identical, 0 beyond the tolerance"), std::string::npos) << v.err;

  Tensor o = h5_read(c, "/reference/L02.attn.core/o");
  o.data<double>()[17] *= 1.0 + 1e-9;  // one element, far below any candidate's error
  {
    H5Writer w(c, c);
    w.write("/reference/L02.attn.core/o", o);
    w.commit();
  }
  const auto before = std::filesystem::last_write_time(c);
  v = run(fmt::format("golden '{}' --verify", c));
  EXPECT_EQ(v.code, 1) << v.err;
  // The edited tensor, and the one stage that reads it (its stored output came from the
  // unedited one); every other stage reads stored inputs, so nothing else moves.
  EXPECT_NE(v.err.find("179 bit-identical, 2 beyond"), std::string::npos) << v.err;
  EXPECT_NE(v.out.find("L02.attn.core/o"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("L02.attn.o_rope/out"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(" 1 of "), std::string::npos) << v.out;  // the one edited element
  EXPECT_EQ(std::filesystem::last_write_time(c), before);
  EXPECT_EQ(run(fmt::format("golden '{}' --verify --tolerance -1", c)).code, 2);
}

TEST_F(CliRun, BadInputsExitTwoWithOneLine) {
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  const std::string c = path("c.h5");
  for (const std::string& args : {fmt::format("golden '{}' --stages 'L9*'", c), fmt::format("golden '{}'", path("none.h5")),
                                  fmt::format("run '{}' --set bogus=1", c), fmt::format("run '{}' --set 'L99.*:storage=fp16'", c),
                                  fmt::format("run '{}' --set storage=fp9", c), fmt::format("run '{}' --policy nope", c),
                                  fmt::format("run '{}' --model '{}'", c, path("none")),
                                  fmt::format("run '{}' --hip-gemm vector", c),  // emu has no GEMM unit to pick
                                  // sizes beyond what the model takes, refused before allocating
                                  fmt::format("case new --model '{}' --random-prompts 1 --len 1000000000000 --seed 1 -o '{}'",
                                              path("m"), path("x.h5")),
                                  fmt::format("case new --model '{}' --random-prompts 1 --len 8 --pad-to 1000000000000 --seed 1 -o '{}'",
                                              path("m"), path("x.h5"))}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("tdiff: error: ", 0), 0u) << r.err;
  }
  // A truncated case: error, and the file is left as it was.
  {
    std::ifstream in(c, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path("t.h5"), std::ios::binary) << bytes.substr(0, 4096);
  }
  for (const char* cmd : {"golden", "run"}) {
    const CliResult r = run(fmt::format("{} '{}'", cmd, path("t.h5")));
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.err.find("t.h5"), std::string::npos) << r.err;
    EXPECT_EQ(std::filesystem::file_size(path("t.h5")), 4096u);
  }
  // No temporary files left beside the case.
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

// Selection replay (the default) on a tiny model whose expert and indexer scores sit close
// together: fixed flips some choices on bf16 noise alone. Replayed, later stages get the
// reference's choices, the flips are reported (a note on a PASS: the candidate's own scores
// explain them) and the run passes the default thresholds; free (--selections free), the
// candidate follows its own choices and is judged against the reference that follows them
// too, and passes as well. A top-k that compares in bf16 picks ids its own float32 scores
// rank lower: replayed or free, that fails at a moe.select.
TEST_F(CliRun, ReplayedSelectionsPassFixedAndStillCatchATopkFault) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m1"))).code, 0);
  const std::string c = path("near-ties.h5");
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 4 --len 96 --seed 3 -o '{}'", path("m1"), c)).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);

  const CliResult replay = run(fmt::format("run '{}' -o '{}'", c, path("replay")));
  EXPECT_EQ(replay.code, 0) << replay.out;
  EXPECT_NE(replay.out.find("first divergence: none"), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("selections replayed from the reference"), std::string::npos) << replay.out;
  std::ifstream csv(path("replay/report.csv"));
  const std::string rows((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
  int flipped = 0;  // selection rows that differ, every flip right on the candidate's own scores
  for (std::istringstream in(rows); std::getline(in, line_);)
    if (line_.find(".moe.select,") != std::string::npos || line_.find(".attn.idx.topk,") != std::string::npos)
      flipped += line_.find(",PASS,") != std::string::npos && line_.find("all right on the candidate's own scores") != std::string::npos;
  EXPECT_GE(flipped, 2) << rows;

  // Free: the candidate follows its own choices and is judged against the reference that
  // follows them too (exec/followed_reference.h): a correct port passes, a top-k fault FAILs.
  const CliResult free = run(fmt::format("run '{}' --selections free --no-reports", c));
  EXPECT_EQ(free.code, 0) << free.out;
  EXPECT_NE(free.out.find("following the candidate's selections"), std::string::npos) << free.out;
  const CliResult free_fault = run(fmt::format("run '{}' --selections free --set topk_compare=bf16 --no-reports", c));
  EXPECT_EQ(free_fault.code, 1) << free_fault.out;
  EXPECT_NE(free_fault.out.find("rank lower"), std::string::npos) << free_fault.out;

  const CliResult bf16_compare = run(fmt::format("run '{}' --set topk_compare=bf16 --no-reports", c));
  EXPECT_EQ(bf16_compare.code, 1) << bf16_compare.out;
  EXPECT_NE(bf16_compare.out.find("moe.select/idx"), std::string::npos) << bf16_compare.out;
  EXPECT_NE(bf16_compare.out.find("rank lower"), std::string::npos) << bf16_compare.out;

  const CliResult bad = run(fmt::format("run '{}' --selections sometimes", c));
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(count_lines(bad.err), 1u) << bad.err;
}

// The reference's fault catalog (docs/reference/fault-catalog.md) is a copy of `tdiff info
// --knobs`: every line must be there, so the documentation cannot drift from the knobs the code has.
TEST_F(CliRun, DocsFaultCatalogMatchesInfoKnobs) {
  const CliResult r = run("info --knobs");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(std::string(TDIFF_SOURCE_DIR) + "/docs/reference/fault-catalog.md");
  const std::string readme((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream lines(r.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    EXPECT_NE(readme.find(line + "\n"), std::string::npos) << "docs/reference/fault-catalog.md lacks: " << line;
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(knob_catalog().size()) + 2);
}

}  // namespace
}  // namespace tdiff
