// The whole reference on the tiny model: padding never changes a real token's result, and the
// outputs are bit-identical for any thread count and across runs.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "casefile/case_file.h"
#include "backend/executor.h"
#include "synth/synth.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class RefCpuModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-refcpu-model-{}", ::getpid()));
    fs::remove_all(*dir_);
    config_ = new ModelConfig(synth_preset("tiny"));
    write_synth_model(*config_, 5, dir_->string());
    weights_ = new WeightStore(dir_->string(), *config_);
  }
  static void TearDownTestSuite() {
    delete weights_;
    fs::remove_all(*dir_);
    delete dir_;
    delete config_;
  }

  // Runs the reference on a batch and returns every stage output.
  static TensorMap run(const Batch& batch) {
    TensorMap env;
    put_inputs(batch, env);
    RunContext ctx{*config_, *weights_, batch, TieRule::lowest_index};
    refcpu::RefCpuBackend ref;
    execute(build_stages(*config_), [&](const Stage&) -> Backend& { return ref; }, ctx, env, {}, true);
    return env;
  }

  static Batch batch(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t pad_to, bool left) {
    PromptSet p;
    p.source = "test";
    for (auto& ids : prompts) {
      p.ids.push_back(ids);
      p.lines.emplace_back();
      p.line_no.push_back(0);
    }
    return pad_prompts(p, pad_to, left, config_->vocab_size);
  }

  static std::vector<std::int64_t> prompt(std::int64_t len, std::int64_t salt) {
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < len; ++i) ids.push_back((i * 37 + salt * 101 + 11) % config_->vocab_size);
    return ids;
  }

  static fs::path* dir_;
  static ModelConfig* config_;
  static WeightStore* weights_;
};
fs::path* RefCpuModel::dir_ = nullptr;
ModelConfig* RefCpuModel::config_ = nullptr;
WeightStore* RefCpuModel::weights_ = nullptr;

// Row `row` of a [B,S,...] or [B*S,...] tensor at token `tok` (or entry `tok` of [B,n,...]).
std::vector<double> token_values(const Tensor& t, std::int64_t B, std::int64_t S, std::int64_t row, std::int64_t tok) {
  std::int64_t rows = t.dim(0) == B * S ? B * S : t.dim(0) * t.dim(1);
  const std::int64_t per_row = t.numel() / rows;
  const std::int64_t r = t.dim(0) == B * S ? row * S + tok : row * t.dim(1) + tok;
  std::vector<double> v(static_cast<std::size_t>(per_row));
  for (std::int64_t c = 0; c < per_row; ++c) v[static_cast<std::size_t>(c)] = t.value(r * per_row + c);
  return v;
}

TEST_F(RefCpuModel, PaddedRowsAreBitIdenticalToTheirUnpaddedSequence) {
  // 29 and 22 tokens: several sliding windows, CSA (rate 4) and HCA (rate 8) entries, the
  // indexer selecting (positions >= 19), with windows that do not divide the length.
  const auto a = prompt(29, 1), b = prompt(22, 2);
  const TensorMap alone_a = run(batch({a}, 0, false)), alone_b = run(batch({b}, 0, false));
  for (bool left : {false, true}) {
    const Batch padded = batch({a, b}, 35, left);
    const TensorMap both = run(padded);
    std::int64_t checked = 0;
    for (const Stage& s : build_stages(*config_)) {
      if (s.kind == OpKind::window_mask || s.kind == OpKind::cmp_mask || s.kind == OpKind::idx_score) continue;  // shapes depend on S
      for (const auto& out : s.outputs) {
        const std::string key = s.name + "/" + out;
        const Tensor& p = both.at(key);
        for (int r = 0; r < 2; ++r) {
          const Tensor& single = (r == 0 ? alone_a : alone_b).at(key);
          const std::int64_t len = r == 0 ? 29 : 22, off = padded.start[static_cast<std::size_t>(r)];
          const bool entries = p.dim(0) == 2 && p.rank() == 3 && p.dim(1) != 35;  // [B,n,d]
          const std::int64_t count = entries ? single.dim(1) : len;
          for (std::int64_t i = 0; i < count; ++i) {
            const auto x = token_values(p, 2, 35, r, entries ? i : off + i);
            const auto y = token_values(single, 1, len, 0, i);
            ASSERT_EQ(x, y) << key << " row " << r << " token " << i << (left ? " (left padding)" : " (right padding)");
            ++checked;
          }
        }
      }
    }
    EXPECT_GT(checked, 5000);
  }
}

TEST_F(RefCpuModel, BitIdenticalForAnyThreadCountAndAcrossRuns) {
  const Batch b = batch({prompt(40, 3), prompt(33, 4)}, 0, false);
  omp_set_num_threads(1);
  const TensorMap one = run(b);
  for (int threads : {2, 4, 4}) {
    omp_set_num_threads(threads);
    const TensorMap other = run(b);
    for (const auto& [key, t] : one) {
      const Tensor& u = other.at(key);
      ASSERT_EQ(t.nbytes(), u.nbytes()) << key;
      ASSERT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << key << " differs with " << threads << " threads";
    }
  }
}

// A weight cache smaller than the model (as for a V4-Flash-sized layer) evicts converted
// weights between stages and converts them again when needed: the same bits.
TEST_F(RefCpuModel, ASmallWeightCacheGivesTheSameBits) {
  const Batch b = batch({prompt(24, 5)}, 0, false);
  const TensorMap full = run(b);
  const std::size_t saved = weights_->budget();
  weights_->set_budget(64 * 1024);  // a few of tiny's tensors at a time
  weights_->trim();
  const TensorMap small = run(b);
  EXPECT_LE(weights_->cached_bytes(), std::size_t{64 * 1024});
  weights_->set_budget(saved);
  for (const auto& [key, t] : full) {
    const Tensor& u = small.at(key);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << key;
    ASSERT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << key;
  }
}

// Streaming every weight by rows (as the lm_head and embedding are at real widths) and the
// routed experts converted one at a time: the same bits as whole weights.
TEST_F(RefCpuModel, StreamedWeightsGiveTheSameBits) {
  const Batch b = batch({prompt(24, 5), prompt(17, 6)}, 0, false);
  const TensorMap whole = run(b);
  const std::size_t saved = weights_->stream_bytes();
  weights_->set_stream_bytes(0);
  ASSERT_TRUE(weights_->streamed("lm_head.weight"));
  const TensorMap streamed = run(b);
  weights_->set_stream_bytes(saved);
  for (const auto& [key, t] : whole) {
    const Tensor& u = streamed.at(key);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << key;
    ASSERT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << key;
  }
}

TEST_F(RefCpuModel, OutputsAreFiniteAndNotDegenerate) {
  const TensorMap out = run(batch({prompt(40, 5)}, 0, false));
  const Tensor& logits = out.at("lm_head/logits");
  double mx = 0;
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits.value(i)));
    mx = std::max(mx, std::fabs(logits.value(i)));
  }
  EXPECT_GT(mx, 1e-3);
  // Every expert is used somewhere (the synthetic router is not collapsed).
  std::set<std::int64_t> used;
  for (int l = 1; l < 4; ++l) {
    const Tensor& idx = out.at(fmt::format("L{:02d}.moe.select/idx", l));
    for (std::int64_t i = 0; i < idx.numel(); ++i) used.insert(static_cast<std::int64_t>(idx.value(i)));
  }
  EXPECT_EQ(used.size(), static_cast<std::size_t>(config_->n_routed_experts));
}

// A candidate may hand over float32 or 16-bit outputs (hip copies them as stored): refcpu
// widens them exactly, so every stage gives the bits it gives for the same values in float64.
TEST_F(RefCpuModel, NarrowFloatInputsAreWidenedExactly) {
  const Batch b = batch({prompt(40, 7)}, 0, false);
  const TensorMap out = run(b);
  RunContext ctx{*config_, *weights_, b, TieRule::lowest_index};
  refcpu::RefCpuBackend ref;
  TensorMap inputs;
  put_inputs(b, inputs);
  for (DType narrow : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(narrow)));
    int checked = 0;
    for (const Stage& s : build_stages(*config_)) {
      std::vector<Tensor> as_f64, as_narrow;
      bool any_float = false;
      for (const auto& r : s.inputs) {
        const Tensor& t = out.count(r.key()) ? out.at(r.key()) : inputs.at(r.key());
        if (t.dtype() != DType::f64) {
          as_f64.push_back(t), as_narrow.push_back(t);
          continue;
        }
        any_float = true;
        as_narrow.push_back(t.to(narrow));
        as_f64.push_back(as_narrow.back().to(DType::f64));  // the same values, float64
      }
      if (!any_float) continue;
      std::vector<const Tensor*> p64, pn;
      for (std::size_t k = 0; k < as_f64.size(); ++k) p64.push_back(&as_f64[k]), pn.push_back(&as_narrow[k]);
      const auto y64 = ref.run(s, p64, ctx), yn = ref.run(s, pn, ctx);
      ASSERT_EQ(y64.size(), yn.size()) << s.name;
      for (std::size_t k = 0; k < y64.size(); ++k) {
        ASSERT_EQ(y64[k].dtype(), yn[k].dtype()) << s.name;
        ASSERT_EQ(0, std::memcmp(y64[k].raw(), yn[k].raw(), y64[k].nbytes())) << s.name << "/" << s.outputs[k];
      }
      ++checked;
    }
    EXPECT_GT(checked, 100);
  }
}

}  // namespace
}  // namespace tdiff
