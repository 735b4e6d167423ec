#pragma once
// A small real model folder (config.json + model.safetensors, every layer type and both MLP
// types) and a token file in a scratch folder of the test's own, for the case-file tests and
// the `case new` / `info` command tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "formats/safetensors.h"
#include "formats/weights.h"

namespace tdiff::testing {

namespace fs = std::filesystem;

// Small enough to write in milliseconds; every layer type and both MLP types appear.
inline ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 50, c.hidden_size = 16, c.num_hidden_layers = 3, c.num_attention_heads = 2;
  c.head_dim = 16, c.rope_dim = 4, c.q_lora_rank = 8, c.o_groups = 1, c.o_lora_rank = 8;
  c.n_routed_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 8;
  c.index_n_heads = 2, c.index_head_dim = 8, c.index_topk = 2, c.sliding_window = 4;
  c.csa_rate = 2, c.hca_rate = 4, c.hc_mult = 2;
  c.layer_types = {LayerType::sliding, LayerType::csa, LayerType::hca};
  c.mlp_types = {MlpType::hash_moe, MlpType::moe, MlpType::moe};
  c.validate("small_config");
  return c;
}

// Writes config.json and model.safetensors; `shape_override` gives one weight a wrong shape.
inline void write_model(const std::string& dir, const ModelConfig& c, const std::string& bad_name = "",
                 const Shape& bad_shape = {}) {
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "config.json") << config_to_json(c).dump(2);
  std::mt19937_64 rng(42);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, spec] : expected_weights(c)) {
    const Shape shape = name == bad_name ? bad_shape : spec.shape;
    Tensor t(spec.integer ? DType::i64 : DType::f32, shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      if (spec.integer) t.data<std::int64_t>()[i] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.n_routed_experts));
      else t.data<float>()[i] = static_cast<float>(static_cast<double>(rng() % 2001) / 1000.0 - 1.0) * 0.05f;
    }
    tensors.emplace_back(name, std::move(t));
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
}

inline std::string slurp_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ModelFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tdiff-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    model_ = (dir_ / "model").string();
    write_model(model_, config_);
    tokens_ = path("prompts.txt");
    std::ofstream(tokens_) << "1 17 42 3 3 3 49\n\n  0 8 8 8 9  \n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string out(const std::string& name) const { return (dir_ / "out" / name).string(); }
  bool out_dir_empty() const { return fs::is_empty(dir_ / "out"); }

  CaseInfo make_info(const std::string& pad_side = "right", std::int64_t pad_to = 0) const {
    CaseInfo c = case_for_model(model_);
    add_weight_checksums(c);
    const PromptSet p = read_token_file(tokens_, c.config.vocab_size);
    c.batch = pad_prompts(p, pad_to, pad_side == "left", c.config.vocab_size);
    c.seed = 9;
    c.pad_to = pad_to;
    c.pad_side = pad_side;
    c.prompts = p.lines;
    return c;
  }

  fs::path dir_;
  ModelConfig config_ = small_config();
  std::string model_, tokens_;
};

}  // namespace tdiff::testing
