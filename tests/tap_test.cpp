// The tap (src/tap/tap.h) and dumps as candidates (`tdiff run --candidate-dump`,
// exec/candidate_dump.h): what an external engine writes is read back as written, bad input
// is refused with a message naming it, and a tapped engine gets the report a backend gets.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "backend/backend.h"
#include "base/dtype.h"
#include "casefile/h5io.h"
#include "diff/real_rows.h"
#include "tap/tap.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::slurp;

class TapTest : public testing::CliTest {
 protected:
  // Only the named files: no temporaries left beside them.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(TapTest, WritesWhatTdiffReads) {
  const std::string out = path("dump.h5");
  tdiff_tap* tap = tdiff_tap_open(out.c_str(), "isolated");
  ASSERT_NE(tap, nullptr) << tdiff_tap_error();
  const std::vector<float> f = {1.5f, -2.25f, 3.0f, 1e-3f, 7.0f, -0.5f};
  const std::vector<std::uint16_t> bf = {bf16_bits(1.0), bf16_bits(-3.5), bf16_bits(0.125)};
  const std::vector<std::int64_t> idx = {3, 0, 2, 1};
  const std::vector<std::uint8_t> flags = {1, 0, 1};
  const std::int64_t s23[] = {2, 3}, s3[] = {3}, s22[] = {2, 2};
  EXPECT_EQ(tdiff_tap_attr(tap, "engine", "unit test"), 0);
  EXPECT_EQ(tdiff_tap_write(tap, "L00.attn.core/o", "f32", s23, 2, f.data()), 0) << tdiff_tap_error();
  EXPECT_EQ(tdiff_tap_write(tap, "embed/e", "bf16", s3, 1, bf.data()), 0) << tdiff_tap_error();
  EXPECT_EQ(tdiff_tap_write(tap, "L00.moe.select/idx", "i64", s22, 2, idx.data()), 0) << tdiff_tap_error();
  EXPECT_EQ(tdiff_tap_write(tap, "mask.window/m", "bool", s3, 1, flags.data()), 0) << tdiff_tap_error();
  EXPECT_FALSE(fs::exists(out)) << "nothing in place before close";
  ASSERT_EQ(tdiff_tap_close(tap), 0) << tdiff_tap_error();

  const Tensor a = h5_read(out, "/L00.attn.core/o");
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_EQ(a.data<float>()[i], f[i]);
  const Tensor b = h5_read(out, "/embed/e");
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.value(1), -3.5);
  EXPECT_EQ(h5_read(out, "/L00.moe.select/idx").value(0), 3.0);
  EXPECT_EQ(h5_read(out, "/mask.window/m").dtype(), DType::boolean);
  const auto attrs = h5_read_attrs(out, "/");
  EXPECT_EQ(attrs.at("env.engine"), "unit test");
  EXPECT_EQ(attrs.at("tdiff_dump_mode"), "isolated");
  EXPECT_EQ(listing(), std::vector<std::string>{"dump.h5"});
}

TEST_F(TapTest, RefusesBadInputWithAMessageAndLeavesNoFile) {
  const std::string out = path("dump.h5");
  EXPECT_EQ(tdiff_tap_open(out.c_str(), "replay"), nullptr);
  EXPECT_NE(std::string(tdiff_tap_error()).find("mode 'replay'"), std::string::npos) << tdiff_tap_error();
  EXPECT_EQ(tdiff_tap_open(path("no/such/folder/d.h5").c_str(), "run"), nullptr);
  EXPECT_NE(std::string(tdiff_tap_error()).find("no/such/folder"), std::string::npos) << tdiff_tap_error();

  const float v[4] = {1, 2, 3, 4};
  const std::int64_t s4[] = {4}, neg[] = {-4};
  struct Case {
    const char* name;
    const char* dtype;
    const std::int64_t* shape;
    const void* data;
    const char* says;
  };
  for (const Case& c : {Case{"logits", "f32", s4, v, "<stage>/<tensor>"}, Case{"a/b/c", "f32", s4, v, "<stage>/<tensor>"},
                        Case{"../x/y", "f32", s4, v, "<stage>/<tensor>"}, Case{"lm_head/logits", "f128", s4, v, "f128"},
                        Case{"lm_head/logits", "f32", neg, v, "negative"}, Case{"lm_head/logits", "f32", s4, nullptr, "no data"}}) {
    tdiff_tap* tap = tdiff_tap_open(out.c_str(), "run");
    ASSERT_NE(tap, nullptr);
    EXPECT_EQ(tdiff_tap_write(tap, c.name, c.dtype, c.shape, 1, c.data), -1) << c.name;
    const std::string err = tdiff_tap_error();
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
    EXPECT_NE(err.find(out), std::string::npos) << "names the dump: " << err;
    EXPECT_EQ(tdiff_tap_write(tap, "embed/e", "f32", s4, 1, v), -1) << "nothing more after an error";
    EXPECT_EQ(tdiff_tap_close(tap), -1);
    EXPECT_TRUE(listing().empty()) << c.name << ": " << fmt::format("{}", fmt::join(listing(), " "));
  }
  tdiff_tap* twice = tdiff_tap_open(out.c_str(), "run");
  EXPECT_EQ(tdiff_tap_write(twice, "embed/e", "f32", s4, 1, v), 0);
  EXPECT_EQ(tdiff_tap_write(twice, "embed/e", "f32", s4, 1, v), -1);
  EXPECT_NE(std::string(tdiff_tap_error()).find("embed/e: written twice"), std::string::npos) << tdiff_tap_error();
  tdiff_tap_discard(twice);
  EXPECT_EQ(tdiff_tap_close(nullptr), -1);
  EXPECT_TRUE(listing().empty());
}

TEST_F(TapTest, CppTapIsDiscardedUnlessClosed) {
  const std::vector<double> v = {1, 2, 3};
  {
    Tap tap(path("dropped.h5"));
    tap.write("lm_head/logits", v, {1, 3});
  }  // an exception unwinding through an engine ends the same way
  EXPECT_TRUE(listing().empty());
  Tap tap(path("kept.h5"));
  tap.write("lm_head/logits", v, {1, 3});
  EXPECT_THROW(tap.write("logits", v, {3}), std::runtime_error);
  EXPECT_THROW(tap.close(), std::runtime_error) << "an incomplete dump is not committed";
  EXPECT_TRUE(listing().empty());
}

TEST_F(TapTest, MinimalCProgramWritesItsDump) {
  const std::string out = path("c.h5");
  const int status = std::system(fmt::format("'{}' '{}' >'{}' 2>&1", TAP_MINIMAL_BIN, out, path("log")).c_str());
  ASSERT_EQ(WEXITSTATUS(status), 0) << slurp(path("log"));
  EXPECT_EQ(h5_read(out, "/lm_head/logits").shape(), (Shape{2, 3, 4}));
  EXPECT_NE(slurp(path("log")).find("refused as expected"), std::string::npos);
}

// `tdiff run --candidate-dump` on a tiny model's case.
class CliDump : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 24 --seed 2 -o '{}'", path("m"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  std::string c() const { return "'" + path("c.h5") + "'"; }
  void tap_emu(const std::string& policy, const std::string& out, const std::string& mode = "run") const {
    const int status = std::system(fmt::format("'{}' {} {} 7 '{}' {} >/dev/null", TAP_EMU_BIN, c(), policy, out, mode).c_str());
    ASSERT_EQ(WEXITSTATUS(status), 0);
  }
  // A dump holding `keys` copied from the reference, and `extra` written as given.
  void partial_dump(const std::string& out, const std::vector<std::string>& keys) const {
    Tap tap(out);
    for (const auto& k : keys) {
      const Tensor t = h5_read(path("c.h5"), "/reference/" + k);
      tap.write_raw(k, std::string(dtype_name(t.dtype())), t.raw(), t.shape());
    }
    tap.close();
  }
};

TEST_F(CliDump, ATappedEngineGetsTheReportOfTheBackend) {
  tap_emu("naive", path("dump.h5"));
  const CliResult emu = run(fmt::format("run {} --backend emu --policy naive --seed 7 --selections free -o '{}'", c(), path("emu")));
  const CliResult dump =
      run(fmt::format("run {} --candidate-dump '{}' --dump-policy naive -o '{}'", c(), path("dump.h5"), path("dump")));
  ASSERT_EQ(dump.code, emu.code) << dump.out << dump.err;
  EXPECT_NE(dump.out.find("first divergence:"), std::string::npos) << dump.out;
  EXPECT_EQ(dump.out.find("dump lacks"), std::string::npos) << "every stage tapped: " << dump.out;
  // Row for row the same metrics, expected errors and verdicts (--dump-policy: the formats
  // the tapped engine stores in).
  const std::string a = slurp(path("emu/report.csv")), b = slurp(path("dump/report.csv"));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  for (const char* f : {"report.html", "report.json", "junit.xml"}) EXPECT_TRUE(fs::exists(path(std::string("dump/") + f))) << f;
  const auto j = nlohmann::json::parse(slurp(path("dump/report.json")));
  EXPECT_NE(j.dump().find("tap_emu.cpp"), std::string::npos) << "the dump's environment record is in the report";
  EXPECT_NE(run(fmt::format("info {}", c())).out.find("dump"), std::string::npos) << "the run is recorded in the case";
}

TEST_F(CliDump, AnIsolatedDumpIsRankedAsBisectIsolateRanksTheBackend) {
  tap_emu("naive", path("iso.h5"), "isolated");
  const CliResult dump = run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("iso.h5")));
  const CliResult bis = run(fmt::format("bisect {} --policy naive --seed 7 --mode isolate --floor none --no-reports", c()));
  ASSERT_NE(dump.code, 2) << dump.err;
  ASSERT_NE(bis.code, 2) << bis.err;
  const auto first = [](const std::string& out, const std::string& header) {
    const auto h = out.find(header);
    if (h == std::string::npos) return std::string();
    const auto line = out.find("\n   1  ", h);
    return out.substr(line + 7, out.find(' ', line + 7) - line - 7);
  };
  const std::string top_dump = first(dump.out, "isolated stages (each on the reference's inputs)");
  ASSERT_FALSE(top_dump.empty()) << dump.out;
  EXPECT_EQ(top_dump, first(bis.out, "isolation: every stage")) << dump.out << bis.out;
}

TEST_F(CliDump, SaysWhichStagesTheDumpLacks) {
  partial_dump(path("part.h5"), {"embed/e", "lm_head/logits"});
  const CliResult r = run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("part.h5")));
  EXPECT_EQ(r.code, 0) << r.out << r.err;  // identical where present; missing stages WARN
  EXPECT_NE(r.out.find("dump lacks 151 of 153 stages with a reference: hc.expand, rope.main"), std::string::npos) << r.out;
  // A case attached to a ticket travels without its model: the dump is still judged.
  fs::rename(path("m"), path("elsewhere"));
  const CliResult alone = run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("part.h5")));
  EXPECT_EQ(alone.code, 0) << alone.out << alone.err;
  EXPECT_NE(alone.out.find("note: without the model"), std::string::npos) << alone.out;
}

TEST_F(CliDump, SizeOneDimensionsAreSqueezedBeforeJudging) {
  const Tensor e = h5_read(path("c.h5"), "/reference/embed/e");
  Shape s = e.shape();
  s.insert(s.begin(), 1);
  Tap tap(path("d.h5"));
  tap.write_raw("embed/e", "f64", e.raw(), s);
  tap.close();
  const CliResult r = run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("d.h5")));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST_F(CliDump, BadDumpsExitTwoNamingTheTensor) {
  const Tensor e = h5_read(path("c.h5"), "/reference/embed/e");
  const Tensor idx = h5_read(path("c.h5"), "/reference/L00.moe.select/idx");
  auto expect_refused = [&](const std::string& file, const std::string& says) {
    const std::string before = slurp(path("c.h5"));
    const CliResult r = run(fmt::format("run {} --candidate-dump '{}' -o '{}'", c(), file, path("rep")));
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("rep"))) << "no report for a refused dump";
    EXPECT_EQ(slurp(path("c.h5")), before) << "the case is not touched";
  };
  {
    Tap tap(path("name.h5"));
    tap.write_raw("L99.attn.core/o", "f64", e.raw(), e.shape());
    tap.close();
  }
  expect_refused(path("name.h5"), "L99.attn.core/o is not an output of a stage of this model");
  {
    Tap tap(path("shape.h5"));
    Shape s = e.shape();
    s.back() -= 1;
    tap.write_raw("embed/e", "f64", e.raw(), s);
    tap.close();
  }
  expect_refused(path("shape.h5"), "embed/e has shape");
  {
    Tap tap(path("dtype.h5"));
    const Tensor f = idx.to(DType::f32);
    tap.write_raw("L00.moe.select/idx", "f32", f.raw(), f.shape());
    tap.close();
  }
  expect_refused(path("dtype.h5"), "L00.moe.select/idx is f32 where the reference holds");
  expect_refused(path("c.h5") + "' --backend 'emu", "--backend");
}

}  // namespace
}  // namespace tdiff

namespace tdiff {
namespace {

// transformers' own float64 capture (python/capture_hf.py, tests/oracle/) as the candidate:
// padding positions differ by design, helper tensors are not stage outputs, and on real
// tokens every stage passes.
TEST_F(CliDump, TransformersCaptureOfAPaddedBatchPassesOnRealTokens) {
  const std::string oracle = std::string(TDIFF_SOURCE_DIR) + "/tests/oracle/";
  fs::copy_file(oracle + "tiny-pad.case.h5", path("pad.h5"));
  ASSERT_EQ(run(fmt::format("golden '{}' --model '{}' --tie-rule torch-cpu", path("pad.h5"), path("m"))).code, 0);
  const CliResult r = run(fmt::format("run '{}' --model '{}' --candidate-dump '{}' -o '{}'", path("pad.h5"), path("m"),
                                      oracle + "tiny-pad.hf.h5", path("rep")));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 FAIL, 0 WARN, 181 PASS of 181 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("judged on real tokens only: 66 of 80 positions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dump has 8 tensors no stage produces, not compared: L00.moe.select/idx_sorted"), std::string::npos)
      << r.out;
}

TEST(RealRows, TokensAndCompressedEntriesOfAPaddedBatch) {
  Tensor ids(DType::i64, {2, 4}), mask(DType::u8, {2, 4});
  const std::uint8_t m[] = {1, 1, 1, 0, 1, 1, 0, 0};
  std::copy(m, m + 8, mask.data<std::uint8_t>());
  const Batch b = Batch::make(ids, mask, 16, "test");
  const RealRows tokens = real_rows(Tensor(DType::f32, {2, 4, 3}), b, 0);
  EXPECT_EQ(tokens.real, (std::vector<bool>{true, true, true, false, true, true, false, false}));
  EXPECT_EQ(tokens.inner, (Shape{3}));
  const RealRows flat = real_rows(Tensor(DType::i64, {8, 2}), b, 0);
  EXPECT_EQ(flat.count(), 5);
  // Rate 2: row 0 has 3 real tokens (entry 0 complete, entry 1 not), row 1 has 2 (entry 0).
  const RealRows entries = real_rows(Tensor(DType::f64, {2, 2, 5}), b, 2);
  EXPECT_EQ(entries.real, (std::vector<bool>{true, false, true, false}));
  Tensor t(DType::f32, {2, 4, 3});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  const Tensor kept = keep_real_rows(t, tokens);
  EXPECT_EQ(kept.shape(), (Shape{5, 3}));
  EXPECT_EQ(kept.value(9), 12.0) << "row 3 of the kept ones is token (1, 0)";
}

}  // namespace
}  // namespace tdiff
