#pragma once
// The DeepSeek-V4 model configuration, resolved from a Hugging Face config.json with the
// same rules as transformers 5.17 (model-spec §1), legacy release keys included.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tdiff {

enum class LayerType { sliding, csa, hca };
enum class MlpType { hash_moe, moe };

const char* layer_type_name(LayerType t);  // HF names: sliding_attention, ...

struct RopeTable {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;  // YaRN s
  double original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct ModelConfig {
  std::int64_t vocab_size = 129280;
  std::int64_t hidden_size = 4096;          // D
  std::int64_t num_hidden_layers = 43;      // N_L
  std::int64_t num_attention_heads = 64;    // H
  std::int64_t head_dim = 512;              // d
  std::int64_t rope_dim = 64;               // r = d * partial_rotary_factor
  std::int64_t q_lora_rank = 1024;          // R_q
  std::int64_t o_groups = 8;                // G
  std::int64_t o_lora_rank = 1024;          // R_o
  std::int64_t sliding_window = 128;        // W
  std::int64_t csa_rate = 4;                // m
  std::int64_t hca_rate = 128;              // m'
  std::int64_t index_n_heads = 64;          // H_I
  std::int64_t index_head_dim = 128;        // d_I
  std::int64_t index_topk = 512;            // k_I
  std::int64_t hc_mult = 4;                 // n_hc
  std::int64_t hc_sinkhorn_iters = 20;      // T_sk
  std::int64_t n_routed_experts = 256;      // E
  std::int64_t num_experts_per_tok = 6;     // K
  std::int64_t moe_intermediate_size = 2048;  // I
  double rms_norm_eps = 1e-6;
  double hc_eps = 1e-6;
  double swiglu_limit = 10.0;
  double routed_scaling_factor = 1.5;
  double initializer_range = 0.02;
  std::int64_t max_position_embeddings = 1048576;
  RopeTable rope_main{10000.0};
  RopeTable rope_compress{160000.0};
  std::vector<LayerType> layer_types;
  std::vector<MlpType> mlp_types;

  std::int64_t hc_mix_width() const { return (2 + hc_mult) * hc_mult; }  // M
  std::int64_t rate(LayerType t) const { return t == LayerType::csa ? csa_rate : t == LayerType::hca ? hca_rate : 0; }
  // Checks every dimension against every other; throws InputError naming `source`.
  void validate(const std::string& source) const;
  // Keeps the first k layers.
  void truncate_layers(std::int64_t k);
  // --layers: "K" keeps the first K layers; "0-3", "2,3", "0,2-3" keep those layers of the
  // schedule (attention and MoE types), renumbered from 0. InputError on a bad list.
  void select_layers(const std::string& spec);
};

// Parses a config.json document; `source` names the file in error messages.
ModelConfig parse_config(const nlohmann::json& j, const std::string& source);
// Config text, from a file or from the copy a case stores (its model_config attribute): the
// one entry point for every such text, so that any JSON error (bad syntax, a number JSON
// cannot hold such as 1e999, a key of the wrong type) is an InputError naming `source`.
ModelConfig parse_config_text(const std::string& text, const std::string& source);
// The JSON document of config text, with the same errors (for the keys parse_config does not
// read, such as a release's quantization_config).
nlohmann::json parse_config_json(const std::string& text, const std::string& source);
ModelConfig load_config(const std::string& path);
std::string read_text_file(const std::string& path);
// The HF config.json that transformers' DeepseekV4Config loads back to the same model.
nlohmann::json config_to_json(const ModelConfig& c);

}  // namespace tdiff
