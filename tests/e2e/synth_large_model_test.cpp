// Synthetic models of 146 MB (a vocabulary of 270000: an embedding above the 2^24-element
// block): a bf16 model is the f32 one rounded, and blocks drawn in parallel give the same bytes
// whatever the thread count. Seconds each, so not among the unit tests.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "formats/safetensors.h"
#include "formats/weights.h"
#include "synth/synth.h"
#include "base/sha256.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("tdiff_synth_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  fs::path dir_;
};

TEST_F(SynthTest, Bf16ModelIsTheF32ModelRoundedWithTheReleaseF32TensorsKept) {
  // --dtype bf16: every *.weight and the routed experts in BF16, each value the f32 twin's
  // rounded to nearest even; the HC parameters, sinks, position and routing biases in F32,
  // equal to the twin's; tid2eid unchanged. Over 2^24 elements (a blocked tensor) included.
  ModelConfig c = synth_preset("tiny");
  c.vocab_size = 270000;
  c.truncate_layers(2);  // layer 0 hash-routed (tid2eid), layer 1 top-k (routing bias)
  SynthOptions bf;
  bf.dtype = DType::bf16;
  write_synth_model(c, 4, path("f32"));
  write_synth_model(c, 4, path("bf16"), {}, bf);
  SafetensorsFile a(path("f32/model.safetensors")), b(path("bf16/model.safetensors"));
  std::set<std::string> kept_f32;
  std::int64_t rounded = 0, changed = 0;
  for (const auto& [name, spec] : expected_weights(c)) {
    const Tensor ta = a.tensor(name), tb = b.tensor(name);
    const DType want = synth_storage(name, spec, DType::bf16);
    ASSERT_EQ(b.info(name).dtype, want) << name;
    if (want != DType::bf16) {
      if (want == DType::f32) kept_f32.insert(name.substr(name.rfind('.') + 1));
      EXPECT_EQ(std::memcmp(ta.raw(), tb.raw(), ta.nbytes()), 0) << name;
      continue;
    }
    const auto* f = reinterpret_cast<const float*>(ta.raw());
    const auto* h = reinterpret_cast<const std::uint16_t*>(tb.raw());
    for (std::int64_t i = 0; i < ta.numel(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, &f[i], 4);
      const auto want_bits = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      if (h[i] != want_bits) FAIL() << name << "[" << i << "]";
      ++rounded;
      changed += (u & 0xffffu) != 0;
    }
    const Tensor tw = synth_weight(c, name, spec, 4, bf);  // the streamed file equals synth_weight
    EXPECT_EQ(std::memcmp(tw.raw(), tb.raw(), tb.nbytes()), 0) << name;
  }
  EXPECT_EQ(kept_f32, (std::set<std::string>{"hc_fn", "hc_base", "hc_scale", "fn", "base", "scale", "sinks",
                                              "position_bias", "e_score_correction_bias"}));
  EXPECT_GT(changed, rounded / 2) << "the f32 draws should need rounding";
  // Half the float bytes; tid2eid (int64, 4 MB of this 146 MB model) stays.
  EXPECT_LT(fs::file_size(path("bf16/model.safetensors")), fs::file_size(path("f32/model.safetensors")) * 52 / 100);
  WeightStore ws(path("bf16"), c);  // loads, and the reference reads bf16 exactly
  EXPECT_EQ(ws.f64("lm_head.weight").value(7), static_cast<double>(b.tensor("lm_head.weight").value(7)));
}

TEST_F(SynthTest, LargeTensorsAreDrawnInParallelBlocksWithTheSameBytes) {
  // A vocabulary of 270000 x 64 gives an embedding of 17.3M elements: above the 2^24-element
  // block size, so it is drawn in two independent blocks on two threads. The bytes must not
  // depend on the thread count, the file must equal synth_weight, the blocks must differ, and
  // --outliers must still land in the rows and channels it names (one id in the second block).
  ModelConfig c = synth_preset("tiny");
  c.vocab_size = 270000;
  c.truncate_layers(1);
  omp_set_num_threads(1);
  write_synth_model(c, 9, path("one"));
  omp_set_num_threads(4);
  write_synth_model(c, 9, path("four"));
  SynthOptions opt;
  opt.outliers = true;
  write_synth_model(c, 9, path("outl"), {}, opt);
  EXPECT_EQ(file_sha256(path("one/model.safetensors")), file_sha256(path("four/model.safetensors")));
  const auto specs = expected_weights(c);
  const std::string emb = "model.embed_tokens.weight";
  const Tensor mem = synth_weight(c, emb, specs.at(emb), 9);
  SafetensorsFile f(path("four/model.safetensors")), o(path("outl/model.safetensors"));
  const Tensor disk = f.tensor(emb), witho = o.tensor(emb);
  ASSERT_EQ(mem.nbytes(), disk.nbytes());
  EXPECT_EQ(0, std::memcmp(mem.raw(), disk.raw(), mem.nbytes()));
  const auto* v = reinterpret_cast<const float*>(disk.raw());
  const std::int64_t block = std::int64_t{1} << 24;
  EXPECT_NE(0, std::memcmp(v, v + block, 1000 * sizeof(float)));  // the second block is its own stream
  const SynthOutliers so = synth_outliers(c, 9);
  int placed = 0;
  for (std::int64_t id : so.token_ids)
    for (std::int64_t ch : so.channels) {
      const std::int64_t at = id * c.hidden_size + ch;
      EXPECT_GE(std::fabs(witho.value(at)), 90.0) << id << " " << ch;
      placed += at >= block;
    }
  EXPECT_GT(placed, 0) << "no outlier in the second block: the test does not cover it";
  std::int64_t changed = 0;
  for (std::int64_t i = 0; i < disk.numel(); ++i) changed += disk.value(i) != witho.value(i);
  EXPECT_EQ(changed, static_cast<std::int64_t>(so.token_ids.size() * so.channels.size()));
}

}  // namespace
}  // namespace tdiff
