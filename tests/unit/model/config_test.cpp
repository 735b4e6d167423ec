// config.json parsing (model/config.h): the tiny and V4-Flash configs, the legacy release keys
// HF folds at load (model-spec §1.3), the default schedule, and errors that name the offending key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "base/error.h"

namespace tdiff {
namespace {

using json = nlohmann::json;
using L = LayerType;
using M = MlpType;

// The tiny model of model-spec §9 in the new-style keys.
json tiny_json() {
  return json::parse(R"({
    "model_type": "deepseek_v4", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "head_dim": 32, "partial_rotary_factor": 0.25, "q_lora_rank": 32,
    "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8,
    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                    "compressed_sparse_attention"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
    "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"], "index_n_heads": 4, "index_head_dim": 16,
    "index_topk": 4, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32
  })");
}

// DeepSeek-V4-Flash as released: DeepSeek's key names, 44 compress_ratios (43 layers + 1 MTP).
json flash_release_json() {
  json j = json::parse(R"({
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64,
    "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024,
    "o_groups": 8, "o_lora_rank": 1024, "sliding_window": 128, "num_hash_layers": 3,
    "rope_theta": 10000, "compress_rope_theta": 160000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "hc_mult": 4,
    "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0, "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
    "max_position_embeddings": 1048576, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"
  })");
  json ratios = json::array();
  for (int i = 0; i < 44; ++i) ratios.push_back(i == 43 ? 0 : i < 2 ? 0 : i % 2 == 0 ? 4 : 128);
  j["compress_ratios"] = ratios;
  return j;
}

TEST(Config, Tiny) {
  const ModelConfig c = parse_config(tiny_json(), "tiny.json");
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.csa_rate, 4);
  EXPECT_EQ(c.hca_rate, 8);
  EXPECT_EQ(c.hc_mix_width(), 24);
  EXPECT_EQ(c.layer_types, (std::vector<L>{L::sliding, L::csa, L::hca, L::csa}));
  EXPECT_EQ(c.mlp_types, (std::vector<M>{M::hash_moe, M::moe, M::moe, M::moe}));
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rate(L::hca), 8);
  EXPECT_EQ(c.rate(L::sliding), 0);
}

TEST(Config, FlashReleaseLegacyKeys) {
  const ModelConfig c = parse_config(flash_release_json(), "flash.json");
  EXPECT_EQ(c.num_hidden_layers, 43);
  ASSERT_EQ(c.layer_types.size(), 43u);  // the MTP entry of compress_ratios is dropped
  int sliding = 0, csa = 0, hca = 0;
  for (std::size_t i = 0; i < 43; ++i) {
    const L expect = i < 2 ? L::sliding : i % 2 == 0 ? L::csa : L::hca;
    EXPECT_EQ(c.layer_types[i], expect) << i;
    sliding += c.layer_types[i] == L::sliding, csa += c.layer_types[i] == L::csa, hca += c.layer_types[i] == L::hca;
    EXPECT_EQ(c.mlp_types[i], i < 3 ? M::hash_moe : M::moe) << i;
  }
  EXPECT_EQ(sliding, 2);
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(c.rope_dim, 64);  // qk_rope_head_dim
  EXPECT_EQ(c.csa_rate, 4);   // compress_rates defaults
  EXPECT_EQ(c.hca_rate, 128);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 65536.0);
  EXPECT_EQ(c.rope_compress.beta_fast, 32.0);
  EXPECT_EQ(c.rope_compress.beta_slow, 1.0);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
}

TEST(Config, LegacyCompressRatesAndYarnDefaults) {
  json j = tiny_json();
  j.erase("compress_rates");
  j["compress_rate_csa"] = 4;
  j["compress_rate_hca"] = 16;
  j.erase("partial_rotary_factor");
  j["qk_rope_head_dim"] = 8;
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 256}};
  j["max_position_embeddings"] = 4096;
  const ModelConfig c = parse_config(j, "legacy.json");
  EXPECT_EQ(c.hca_rate, 16);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.factor, 16.0);  // max_position_embeddings / original when factor is absent
  EXPECT_FALSE(c.rope_main.yarn);
}

TEST(Config, DefaultScheduleIsPro) {
  json j = tiny_json();
  j.erase("layer_types");
  j.erase("mlp_layer_types");
  j["num_hidden_layers"] = 6;
  const ModelConfig c = parse_config(j, "pro.json");
  EXPECT_EQ(c.layer_types, (std::vector<L>{L::hca, L::hca, L::hca, L::csa, L::hca, L::csa}));
  EXPECT_EQ(c.mlp_types, (std::vector<M>{M::hash_moe, M::hash_moe, M::hash_moe, M::moe, M::moe, M::moe}));
}

TEST(Config, RoundTripThroughConfigToJson) {
  for (const json& j : {tiny_json(), flash_release_json()}) {
    const ModelConfig a = parse_config(j, "a.json");
    const ModelConfig b = parse_config(config_to_json(a), "b.json");
    EXPECT_EQ(config_to_json(a), config_to_json(b));
    EXPECT_EQ(a.layer_types, b.layer_types);
    EXPECT_EQ(a.rope_compress.yarn, b.rope_compress.yarn);
    EXPECT_EQ(a.rope_compress.factor, b.rope_compress.factor);
  }
}

TEST(Config, TruncateLayers) {
  ModelConfig c = parse_config(flash_release_json(), "flash.json");
  c.truncate_layers(5);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.layer_types.size(), 5u);
  EXPECT_THROW(c.truncate_layers(6), InputError);
  EXPECT_THROW(c.truncate_layers(0), InputError);
}

// The error is an InputError, one line, naming the source file and the key.
void expect_error(const json& j, const std::string& key) {
  try {
    parse_config(j, "bad.json");
    FAIL() << "accepted a config with a bad '" << key << "'";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(key), std::string::npos) << "'" << key << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Config, Errors) {
  json j = tiny_json();
  j.erase("layer_types");
  j["compress_ratios"] = {0, 4, 8, 4};
  expect_error(j, "compress_ratios");

  j = tiny_json();
  j["model_type"] = "deepseek_v3";
  expect_error(j, "model_type");

  j = tiny_json();
  j["layer_types"].erase(3);
  expect_error(j, "layer_types");

  j = tiny_json();
  j["o_groups"] = 3;
  expect_error(j, "o_groups");

  j = tiny_json();
  j["scoring_func"] = "softmax";
  expect_error(j, "scoring_func");

  j = tiny_json();
  j["mlp_layer_types"] = {"moe"};
  expect_error(j, "mlp_layer_types");

  j = tiny_json();
  j["hidden_size"] = "64";
  expect_error(j, "hidden_size");

  j = tiny_json();
  j["layer_types"][1] = "full_attention";
  expect_error(j, "full_attention");

  EXPECT_THROW(parse_config(json::array(), "bad.json"), InputError);
  EXPECT_THROW(load_config("/nonexistent/config.json"), InputError);
}

// Keys of the wrong JSON type and out-of-range values: an input error naming the key (they
// ended in exit 3 as json exceptions, or grew memory until killed).
TEST(Config, WrongTypesAndHugeValuesNameTheKey) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"model_type", 1}, {"scoring_func", false}, {"hidden_act", json::array()}, {"mlp_bias", "no"},
           {"num_hidden_layers", std::int64_t{1000000000000}}}) {
    json j = tiny_json();
    if (key == "num_hidden_layers") j.erase("layer_types"), j.erase("mlp_layer_types");
    j[key] = value;
    expect_error(j, key);
  }
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tdiff-config-{}", ::getpid());
  std::filesystem::create_directories(dir);
  std::string text = tiny_json().dump();
  text = "{\"rms_norm_eps\": 1e999, " + text.substr(1);  // a number JSON cannot hold as a double
  std::ofstream((dir / "config.json").string()) << text;
  try {
    load_config((dir / "config.json").string());
    ADD_FAILURE() << "1e999 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Values no model can have, refused before any arithmetic on them (issue 19, defect 3: each
// overflowed an int64 or a float-to-int cast first; UBSan in scripts/sanitize reported it).
TEST(Config, HugeDimensionsAreRefusedBeforeTheyOverflow) {
  struct Case {
    std::vector<std::pair<std::string, json>> set;
    std::string message;
  };
  const std::int64_t p40 = std::int64_t{1} << 40, p30 = std::int64_t{1} << 30;
  for (const auto& c : std::vector<Case>{
           {{{"partial_rotary_factor", 1e300}}, "partial_rotary_factor is 1e+300, it must be in (0, 1]"},
           {{{"partial_rotary_factor", -0.5}}, "partial_rotary_factor is -0.5"},
           {{{"num_attention_heads", p40}, {"head_dim", p30}, {"o_groups", 1}}, "num_attention_heads x head_dim"},
           {{{"hc_mult", p40}}, "hc_mult x hc_mult x hidden_size (1099511627776 x 1099511627776 x 64)"},
           {{{"n_routed_experts", p40}, {"moe_intermediate_size", p30}}, "n_routed_experts x 2 x moe_intermediate_size"},
           {{{"vocab_size", std::numeric_limits<std::int64_t>::max()}}, "vocab_size x hidden_size"}}) {
    json j = tiny_json();
    for (const auto& [k, v] : c.set) j[k] = v;
    try {
      parse_config(j, "big/config.json");
      ADD_FAILURE() << j.dump() << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("big/config.json: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  // The largest real model's sizes pass (V4-Flash: 256 experts x 2 x 2048 x 4096).
  EXPECT_NO_THROW(parse_config(flash_release_json(), "flash/config.json"));
}

// The one entry point for config text (issue 39, item 3, defect a): every JSON error, a
// number JSON cannot hold included, and every accessor error is an InputError naming the
// source; each key of the scalar table is held to its range.
TEST(Config, TextErrorsAndRangesNameTheSourceAndKey) {
  const std::string text = tiny_json().dump();
  auto message = [](const std::string& t) {
    try {
      parse_config_text(t, "stored (attribute model_config)");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(
      message("{\"rms_norm_eps\": 1e999, " + text.substr(1)).find("stored (attribute model_config): not valid JSON"),
      std::string::npos);
  EXPECT_NE(message("{").find("stored (attribute model_config): not valid JSON"), std::string::npos);
  json j = tiny_json();
  j["rope_parameters"] = {{"main", {{"rope_type", 5}}}};  // json::value() threw a type_error here
  EXPECT_NE(message(j.dump()).find("key 'rope_type' must be a string"), std::string::npos) << message(j.dump());
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, json, std::string>>{
           {"rms_norm_eps", 0.0, "rms_norm_eps is 0, it must be in (0, 1]"},
           {"hc_eps", -1e-6, "hc_eps is -1e-06, it must be in [0, 1]"},
           {"hc_sinkhorn_iters", 1001, "hc_sinkhorn_iters is 1001, it must be in [1, 1000]"},
           {"index_topk", 0, "index_topk is 0, it must be >= 1"},
           {"swiglu_limit", 0.0, "swiglu_limit is 0, it must be > 0"},
           {"initializer_range", -0.02, "initializer_range is -0.02, it must be >= 0"}}) {
    j = tiny_json();
    j[key] = value;
    EXPECT_EQ(message(j.dump()), "stored (attribute model_config): " + says) << key;
  }
  EXPECT_EQ(message(flash_release_json().dump()), "accepted");
}

}  // namespace
}  // namespace tdiff
