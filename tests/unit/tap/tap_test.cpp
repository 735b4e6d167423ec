// The tap (src/tap/tap.h): what an external engine writes is read back as written, bad input is
// refused with a message naming it, and the C example program writes its dump.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "backend/backend.h"
#include "base/dtype.h"
#include "casefile/engine_request.h"
#include "casefile/h5io.h"
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
  EXPECT_EQ(tdiff_tap_open(out.c_str(), "sometimes"), nullptr);
  EXPECT_NE(std::string(tdiff_tap_error()).find("mode 'sometimes'"), std::string::npos) << tdiff_tap_error();
  tdiff_tap* no_case = tdiff_tap_open(out.c_str(), "replay");
  ASSERT_NE(no_case, nullptr);
  std::int64_t idx[2] = {0, 0};
  const std::int64_t s2[] = {2};
  EXPECT_EQ(tdiff_tap_reference(no_case, "L00.moe.select/idx", "i64", s2, 1, idx), -1);
  EXPECT_NE(std::string(tdiff_tap_error()).find("no case: call tdiff_tap_case first"), std::string::npos) << tdiff_tap_error();
  tdiff_tap_discard(no_case);
  EXPECT_EQ(tdiff_tap_case(nullptr, "c.h5"), -1);
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

// A shape whose element or byte count passes 2^63 wrapped in 64 bits ([2^32, 2^32] to 0
// elements) and was written as an empty tensor; refused, naming the shape (issue 39, item 3,
// defect g). A shape with a 0 among huge dimensions is empty, and written.
TEST_F(TapTest, ShapesWhoseSizeOverflowsAreRefused) {
  const std::string out = path("dump.h5");
  const float v[1] = {1};
  const std::int64_t p32 = std::int64_t{1} << 32, p62 = std::int64_t{1} << 62;
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{p32, p32}, {p62, 4}, {p32, p32, p32}, {p62, 2}}) {
    tdiff_tap* tap = tdiff_tap_open(out.c_str(), "run");
    ASSERT_NE(tap, nullptr);
    EXPECT_EQ(tdiff_tap_write(tap, "lm_head/logits", "f32", shape.data(), static_cast<int>(shape.size()), v), -1);
    const std::string err = tdiff_tap_error();
    EXPECT_NE(err.find(fmt::format("shape {} of f32 holds more than 2^63 bytes", shape_str(shape))), std::string::npos)
        << err;
    EXPECT_EQ(tdiff_tap_close(tap), -1);
    EXPECT_TRUE(listing().empty());
  }
  const std::int64_t empty[] = {p62, 0, p62};
  tdiff_tap* tap = tdiff_tap_open(out.c_str(), "run");
  EXPECT_EQ(tdiff_tap_write(tap, "lm_head/logits", "f32", empty, 3, nullptr), 0) << tdiff_tap_error();
  EXPECT_EQ(tdiff_tap_close(tap), 0) << tdiff_tap_error();
  EXPECT_EQ(h5_read(out, "/lm_head/logits").shape(), (Shape{p62, 0, p62}));

  // The C++ tap's vector must hold the shape's elements: {2, 3} of a vector of 3 read past it.
  Tap cpp(path("cpp.h5"));
  EXPECT_THROW(cpp.write("lm_head/logits", std::vector<double>{1, 2, 3}, {2, 3}), std::runtime_error);
  try {
    cpp.write("lm_head/logits", std::vector<double>{1, 2, 3}, {2, 3});
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the shape holds 6 elements, the vector 3"), std::string::npos) << e.what();
  }
}

TEST_F(TapTest, MinimalCProgramWritesItsDump) {
  const std::string out = path("c.h5");
  const int status = std::system(fmt::format("'{}' '{}' >'{}' 2>&1", TAP_MINIMAL_BIN, out, path("log")).c_str());
  ASSERT_EQ(WEXITSTATUS(status), 0) << slurp(path("log"));
  EXPECT_EQ(h5_read(out, "/lm_head/logits").shape(), (Shape{2, 3, 4}));
  EXPECT_NE(slurp(path("log")).find("refused as expected"), std::string::npos);
}

}  // namespace
}  // namespace tdiff

namespace tdiff {
namespace {

// A request (casefile/engine_request.h): the tap opens the dump and the case it names, hands the
// reference's tensor for a substituted stage and nothing for the others, and with the case at
// hand refuses a stage output whose shape the contract does not allow, when it is written.
TEST_F(TapTest, ARequestSubstitutesItsStagesAndTheCaseChecksEveryWrite) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 2 -o '{}'", path("m"), path("c.h5"))).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  EngineRequest r;
  r.case_path = path("c.h5");
  r.dump_path = path("dump.h5");
  r.substitute = {"embed"};
  write_engine_request(path("request.json"), r);
  tdiff_tap* tap = tdiff_tap_open_request(path("request.json").c_str());
  ASSERT_NE(tap, nullptr) << tdiff_tap_error();
  const Tensor e = h5_read(path("c.h5"), "/reference/embed/e");
  std::vector<double> buffer(static_cast<std::size_t>(e.numel()), 0.0);
  EXPECT_EQ(tdiff_tap_substitute(tap, "embed/e", "f64", e.shape().data(), e.rank(), buffer.data()), 1) << tdiff_tap_error();
  EXPECT_EQ(buffer[5], e.value(5));
  EXPECT_EQ(tdiff_tap_substitute(tap, "hc.expand/X", "f64", e.shape().data(), e.rank(), buffer.data()), 0);
  Shape wrong = e.shape();
  wrong.back() -= 1;
  EXPECT_EQ(tdiff_tap_write(tap, "embed/e", "f64", wrong.data(), static_cast<int>(wrong.size()), buffer.data()), -1);
  EXPECT_NE(std::string(tdiff_tap_error()).find("expected floats [B,S,D]"), std::string::npos) << tdiff_tap_error();
  tdiff_tap_discard(tap);
  EXPECT_FALSE(fs::exists(path("dump.h5")));
  EXPECT_EQ(tdiff_tap_open_request(path("none.json").c_str()), nullptr);
  EXPECT_NE(std::string(tdiff_tap_error()).find("cannot read the engine request"), std::string::npos) << tdiff_tap_error();
}

}  // namespace
}  // namespace tdiff
