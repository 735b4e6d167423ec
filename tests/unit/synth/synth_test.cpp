// Synthetic models (synth/synth.h): determinism, loadability, no degenerate tensors, and the
// magnitudes that make attention and routing look like a trained model's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/safetensors.h"
#include "synth/synth.h"
#include "formats/weights.h"
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
  std::size_t entries() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST(SynthPreset, TinyIsSpecSection9) {
  const ModelConfig c = synth_preset("tiny");
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 16);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 4);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.csa_rate, 4);
  EXPECT_EQ(c.hca_rate, 8);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{LayerType::sliding, LayerType::csa, LayerType::hca, LayerType::csa}));
  EXPECT_EQ(c.mlp_types, (std::vector<MlpType>{MlpType::hash_moe, MlpType::moe, MlpType::moe, MlpType::moe}));
  // Spec 9 lists the instantiated shapes.
  const auto w = expected_weights(c);
  EXPECT_EQ(w.at("model.layers.1.self_attn.compressor.kv_proj.weight").shape, (Shape{64, 64}));
  EXPECT_EQ(w.at("model.layers.2.self_attn.compressor.position_bias").shape, (Shape{8, 32}));
  EXPECT_EQ(w.at("model.layers.0.mlp.experts.gate_up_proj").shape, (Shape{8, 64, 64}));
  EXPECT_EQ(w.at("model.layers.0.mlp.gate.tid2eid").shape, (Shape{256, 2}));
}

TEST(SynthPreset, SmallAndFlash) {
  const ModelConfig s = synth_preset("small");
  EXPECT_EQ(s.num_hidden_layers, 6);
  EXPECT_TRUE(s.rope_compress.yarn);
  EXPECT_EQ(s.rope_compress.factor, 16.0);
  EXPECT_EQ(s.rope_compress.original_max_position_embeddings, 256.0);
  EXPECT_EQ(s.layer_types[2], LayerType::csa);
  EXPECT_EQ(s.layer_types[3], LayerType::hca);

  ModelConfig f = synth_preset("v4-flash-dims");
  EXPECT_EQ(f.num_hidden_layers, 43);
  EXPECT_EQ(f.hidden_size, 4096);
  EXPECT_EQ(f.vocab_size, 129280);
  EXPECT_EQ(std::count(f.layer_types.begin(), f.layer_types.end(), LayerType::csa), 21);
  EXPECT_EQ(std::count(f.layer_types.begin(), f.layer_types.end(), LayerType::hca), 20);
  EXPECT_EQ(std::count(f.mlp_types.begin(), f.mlp_types.end(), MlpType::hash_moe), 3);
  EXPECT_EQ(f.rope_compress.original_max_position_embeddings, 65536.0);
  const ModelConfig n = synth_preset("v4-flash-narrow");  // the same schedule and widths, narrow experts
  EXPECT_EQ(n.layer_types, f.layer_types);
  EXPECT_EQ(n.mlp_types, f.mlp_types);
  EXPECT_EQ(n.hidden_size, f.hidden_size);
  EXPECT_EQ(n.vocab_size, f.vocab_size);
  EXPECT_EQ(n.n_routed_experts, 16);
  EXPECT_EQ(n.moe_intermediate_size, 256);
  EXPECT_EQ(n.num_experts_per_tok, f.num_experts_per_tok);
  f.truncate_layers(3);
  EXPECT_EQ(f.layer_types, (std::vector<LayerType>{LayerType::sliding, LayerType::sliding, LayerType::csa}));

  try {
    synth_preset("huge");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset 'huge'"), std::string::npos) << e.what();
  }
}

TEST_F(SynthTest, SameSeedSameBytes) {
  const ModelConfig c = synth_preset("tiny");
  write_synth_model(c, 1, path("a"));
  write_synth_model(c, 1, path("b"));
  write_synth_model(c, 2, path("c"));
  EXPECT_EQ(file_sha256(path("a/model.safetensors")), file_sha256(path("b/model.safetensors")));
  EXPECT_EQ(file_sha256(path("a/config.json")), file_sha256(path("b/config.json")));
  EXPECT_NE(file_sha256(path("a/model.safetensors")), file_sha256(path("c/model.safetensors")));
  EXPECT_EQ(entries(), 3u);  // no temporaries left beside
  // Overwriting an earlier model folder is allowed and gives the new model.
  write_synth_model(c, 2, path("a"));
  EXPECT_EQ(file_sha256(path("a/model.safetensors")), file_sha256(path("c/model.safetensors")));
  EXPECT_EQ(entries(), 3u);
}

TEST_F(SynthTest, PinnedBytes) {
  // The generator uses integer arithmetic only, so these bytes are the same on every platform.
  // A change here changes every synthetic model (and golden cases built on them): update the
  // hash only on purpose, when the initialisation rules change.
  write_synth_model(synth_preset("tiny"), 1, path("m"));
  EXPECT_EQ(file_sha256(path("m/model.safetensors")), "e77b5ea2e8dcf027fc41e1b29d65623eb18fe23b5eb8f10689b4029c37cc6004");
}

TEST_F(SynthTest, TensorValuesDoNotDependOnOtherTensors) {
  // Per-tensor streams: the first two layers of a 2-layer model equal those of the full one,
  // and the streamed file equals synth_weight.
  ModelConfig full = synth_preset("tiny"), two = full;
  two.truncate_layers(2);
  write_synth_model(full, 5, path("full"));
  write_synth_model(two, 5, path("two"));
  SafetensorsFile a(path("full/model.safetensors")), b(path("two/model.safetensors"));
  for (const auto& [name, spec] : expected_weights(two)) {
    const Tensor ta = a.tensor(name), tb = b.tensor(name), tw = synth_weight(two, name, spec, 5);
    ASSERT_EQ(ta.nbytes(), tb.nbytes());
    EXPECT_EQ(std::memcmp(ta.raw(), tb.raw(), ta.nbytes()), 0) << name;
    EXPECT_EQ(std::memcmp(ta.raw(), tw.raw(), ta.nbytes()), 0) << name;
  }
  EXPECT_FALSE(b.has("model.layers.2.input_layernorm.weight"));
  EXPECT_EQ(b.metadata().at("format"), "pt");
}

TEST_F(SynthTest, LoadsAndNothingIsDegenerate) {
  for (const char* preset : {"tiny", "small"}) {
    const ModelConfig c = synth_preset(preset);
    const std::string d = path(preset);
    write_synth_model(c, 3, d);
    const ModelConfig back = load_config(d + "/config.json");
    EXPECT_EQ(config_to_json(back), config_to_json(c)) << preset;
    WeightStore ws(d, back);
    const auto specs = expected_weights(c);
    EXPECT_EQ(ws.files().names().size(), specs.size());
    for (const auto& [name, spec] : specs) {
      EXPECT_EQ(ws.files().info(name).dtype, spec.integer ? DType::i64 : DType::f32) << name;
      if (spec.integer) {
        // K distinct experts per token, and every expert used by some token.
        const Tensor& t = ws.i64(name);
        const auto K = spec.shape[1];
        std::set<std::int64_t> used;
        for (std::int64_t v = 0; v < spec.shape[0]; ++v) {
          std::set<std::int64_t> row(t.data<std::int64_t>() + v * K, t.data<std::int64_t>() + (v + 1) * K);
          EXPECT_EQ(static_cast<std::int64_t>(row.size()), K) << name << " token " << v;
          used.insert(row.begin(), row.end());
        }
        EXPECT_EQ(static_cast<std::int64_t>(used.size()), c.n_routed_experts) << name;
        continue;
      }
      const auto v = ws.f64(name).span<const double>();
      EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](double x) { return x != 0; })) << name << " is all zero";
      const bool is_norm = name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
      if (is_norm) {
        EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](double x) { return x != 1; })) << name << " is all ones";
        EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x > 0; })) << name << " not positive";
      }
    }
  }
}

// Mean-free RMS of a vector, and helpers for the small forward-pass fragments below.
double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}
std::vector<double> rms_norm(std::vector<double> x, const double* g) {
  const double r = rms(x);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] / r * (g ? g[i] : 1.0);
  return x;
}
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x, std::int64_t row0 = 0, std::int64_t rows = -1) {
  const std::int64_t in = w.dim(-1), n = rows < 0 ? w.numel() / in : rows;
  std::vector<double> y(static_cast<std::size_t>(n));
  for (std::int64_t o = 0; o < n; ++o)
    for (std::int64_t k = 0; k < in; ++k) y[o] += w.data<double>()[(row0 + o) * in + k] * x[k];
  return y;
}
double stddev(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST_F(SynthTest, AttentionAndRoutingAreNotUniform) {
  // Layer 1 (CSA, score routing) of tiny, fed with normalised embeddings of 64 tokens: the
  // attention logits q.k/sqrt(d) and the router logits should both spread by O(1), and the
  // biased top-K should use every expert. (The HC collapse only rescales its input, which
  // the norms remove, so it is left out here.)
  const ModelConfig c = synth_preset("tiny");
  write_synth_model(c, 11, path("m"));
  WeightStore ws(path("m"), c);
  const std::string A = "model.layers.1.self_attn.", F = "model.layers.1.mlp.";
  const auto D = c.hidden_size, d = c.head_dim, H = c.num_attention_heads, E = c.n_routed_experts;
  std::vector<std::vector<double>> q, k, z;
  for (std::int64_t t = 0; t < 64; ++t) {
    const double* e = ws.f64("model.embed_tokens.weight").data<double>() + t * D;
    const auto h = rms_norm({e, e + D}, ws.f64("model.layers.1.input_layernorm.weight").data<double>());
    const auto qr = rms_norm(matvec(ws.f64(A + "q_a_proj.weight"), h), ws.f64(A + "q_a_norm.weight").data<double>());
    q.push_back(rms_norm(matvec(ws.f64(A + "q_b_proj.weight"), qr, 0, d), nullptr));  // head 0
    k.push_back(rms_norm(matvec(ws.f64(A + "kv_proj.weight"), h), ws.f64(A + "kv_norm.weight").data<double>()));
    z.push_back(rms_norm({e, e + D}, ws.f64("model.layers.1.post_attention_layernorm.weight").data<double>()));
  }
  std::vector<double> logits;
  for (const auto& qi : q)
    for (const auto& kj : k) {
      double s = 0;
      for (std::int64_t i = 0; i < d; ++i) s += qi[i] * kj[i];
      logits.push_back(s / std::sqrt(static_cast<double>(d)));
    }
  EXPECT_GT(stddev(logits), 0.5);
  EXPECT_LT(stddev(logits), 2.0);
  (void)H;

  std::vector<double> router;
  std::vector<int> uses(static_cast<std::size_t>(E));
  const double* bias = ws.f64(F + "gate.e_score_correction_bias").data<double>();
  for (const auto& zt : z) {
    const auto l = matvec(ws.f64(F + "gate.weight"), zt);
    router.insert(router.end(), l.begin(), l.end());
    std::vector<std::pair<double, int>> sel;
    for (int e = 0; e < E; ++e) sel.push_back({-(std::sqrt(std::log1p(std::exp(l[e]))) + bias[e]), e});
    std::sort(sel.begin(), sel.end());
    for (int j = 0; j < c.num_experts_per_tok; ++j) ++uses[static_cast<std::size_t>(sel[j].second)];
  }
  EXPECT_GT(stddev(router), 0.5);
  EXPECT_LT(stddev(router), 2.0);
  for (int e = 0; e < E; ++e) EXPECT_GT(uses[static_cast<std::size_t>(e)], 0) << "expert " << e << " never chosen";
}

TEST_F(SynthTest, BadOutputFolders) {
  const ModelConfig c = synth_preset("tiny");
  std::ofstream(path("file")) << "x";
  EXPECT_THROW(write_synth_model(c, 1, path("file")), InputError);
  fs::create_directories(path("notes"));
  std::ofstream(path("notes/README.txt")) << "mine";
  EXPECT_THROW(write_synth_model(c, 1, path("notes")), InputError);  // never replaces foreign files
  EXPECT_TRUE(fs::exists(path("notes/README.txt")));
  EXPECT_THROW(write_synth_model(c, 1, path("file/sub")), InputError);
  EXPECT_EQ(entries(), 2u);  // nothing partial left behind
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write_synth_model(c, 1, path("ro/m")), InputError);
    fs::permissions(path("ro"), fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace tdiff
