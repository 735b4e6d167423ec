#include "model/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tdiff {

using json = nlohmann::json;

const char* layer_type_name(LayerType t) {
  switch (t) {
    case LayerType::sliding: return "sliding_attention";
    case LayerType::csa: return "compressed_sparse_attention";
    case LayerType::hca: return "heavily_compressed_attention";
  }
  return "?";
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("{}: cannot open file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

template <class T>
T get_or(const json& j, const char* key, T fallback, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer()) input_error("{}: key '{}' must be an integer, got {}", src, key, it->dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) input_error("{}: key '{}' must be a number, got {}", src, key, it->dump());
    }
    return it->get<T>();
  } catch (const json::exception&) {
    input_error("{}: key '{}' has the wrong type ({})", src, key, it->dump());
  }
}

// A key of another JSON type than the one it needs is an input error naming the key, not a
// json::type_error.
std::string string_or(const json& j, const char* key, const std::string& fallback, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) input_error("{}: key '{}' must be a string, got {}", src, key, it->dump());
  return it->get<std::string>();
}

bool bool_or(const json& j, const char* key, bool fallback, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) input_error("{}: key '{}' must be true or false, got {}", src, key, it->dump());
  return it->get<bool>();
}

LayerType parse_layer_type(const std::string& s, const std::string& src) {
  if (s == "sliding_attention") return LayerType::sliding;
  if (s == "compressed_sparse_attention") return LayerType::csa;
  if (s == "heavily_compressed_attention") return LayerType::hca;
  input_error("{}: unknown layer type '{}' in 'layer_types'", src, s);
}

RopeTable parse_yarn(const json& r, double theta, std::int64_t max_pos, const std::string& src, const char* key) {
  RopeTable t{theta};
  std::string type = string_or(r, "rope_type", string_or(r, "type", "default", src), src);
  if (type == "default") return t;
  if (type != "yarn") input_error("{}: '{}' type '{}' is not supported (default or yarn)", src, key, type);
  t.yarn = true;
  t.original_max_position_embeddings = get_or<double>(r, "original_max_position_embeddings", 0.0, src);
  if (t.original_max_position_embeddings <= 0)
    input_error("{}: '{}' yarn needs original_max_position_embeddings > 0", src, key);
  t.factor = get_or<double>(r, "factor", static_cast<double>(max_pos) / t.original_max_position_embeddings, src);
  t.beta_fast = get_or<double>(r, "beta_fast", 32.0, src);
  t.beta_slow = get_or<double>(r, "beta_slow", 1.0, src);
  if (t.factor <= 0) input_error("{}: '{}' yarn factor must be > 0", src, key);
  return t;
}

// One dimension of a weight's shape, by its config key, for check_weight_sizes' messages.
struct Dim {
  const char* key;
  std::int64_t value;
};

// Every weight the config implies must have an element count whose float64 bytes fit in an
// int64 (tdiff converts weights to float64); past that a key cannot describe a checkpoint.
// Checked as products of the positive dimensions, before expected_weights() or a stage
// multiplies them (num_attention_heads 2^40 x head_dim 2^30 wrapped an int64).
void check_weight_size(std::initializer_list<Dim> dims, const std::string& src) {
  constexpr std::int64_t kMaxElements = std::numeric_limits<std::int64_t>::max() / 8;
  std::int64_t n = 1;
  for (const Dim& d : dims) {
    if (__builtin_mul_overflow(n, d.value, &n) || n > kMaxElements) {
      std::string keys, values;
      for (const Dim& e : dims) {
        keys += fmt::format("{}{}", keys.empty() ? "" : " x ", e.key);
        values += fmt::format("{}{}", values.empty() ? "" : " x ", e.value);
      }
      input_error("{}: a weight of {} ({}) elements is more than any tensor holds (2^60)", src, keys, values);
    }
  }
}

void check_weight_sizes(const ModelConfig& c, const std::string& src) {
  const Dim V{"vocab_size", c.vocab_size}, D{"hidden_size", c.hidden_size}, H{"num_attention_heads", c.num_attention_heads},
      d{"head_dim", c.head_dim}, nhc{"hc_mult", c.hc_mult}, Rq{"q_lora_rank", c.q_lora_rank},
      G{"o_groups", c.o_groups}, Ro{"o_lora_rank", c.o_lora_rank}, HI{"index_n_heads", c.index_n_heads},
      dI{"index_head_dim", c.index_head_dim}, E{"n_routed_experts", c.n_routed_experts},
      K{"num_experts_per_tok", c.num_experts_per_tok}, I{"moe_intermediate_size", c.moe_intermediate_size},
      two{"2", 2};
  check_weight_size({V, D}, src);
  check_weight_size({nhc, nhc, D}, src);  // hc_mult^2 <= 2^60 / D: hc_mult + 2 below cannot wrap
  check_weight_size({Dim{"(hc_mult + 2)", c.hc_mult + 2}, nhc, nhc, D}, src);
  check_weight_size({Rq, D}, src);
  check_weight_size({H, d, Rq}, src);
  check_weight_size({G, Ro, D}, src);
  check_weight_size({Ro, H, d}, src);
  check_weight_size({two, d, D}, src);
  check_weight_size({Dim{"compress_rates.compressed_sparse_attention", c.csa_rate}, two, d}, src);
  check_weight_size({Dim{"compress_rates.heavily_compressed_attention", c.hca_rate}, two, d}, src);
  check_weight_size({two, dI, D}, src);
  check_weight_size({Dim{"compress_rates.compressed_sparse_attention", c.csa_rate}, two, dI}, src);
  check_weight_size({HI, dI, Rq}, src);
  check_weight_size({HI, D}, src);
  check_weight_size({E, D}, src);
  check_weight_size({V, K}, src);
  check_weight_size({E, two, I, D}, src);
}

// The numeric keys read as they are, in this order: one row per field, its default the
// ModelConfig's own, and the values a model can have; validate() checks them once the whole
// config is read. Every dimension is at least 1 (0 or a negative size reached the stage
// builders); the bounds past that are the ones arithmetic needs: check_weight_sizes bounds
// the products of dimensions, and the rest bound a loop or a division.
struct ScalarKey {
  const char* key;
  std::variant<std::int64_t ModelConfig::*, double ModelConfig::*> field;
  double min = 1;
  bool min_excluded = false;  // (min, max] rather than [min, max]
  double max = std::numeric_limits<double>::infinity();
};
constexpr double kInf = std::numeric_limits<double>::infinity();
const ScalarKey kScalarKeys[] = {
    {"vocab_size", &ModelConfig::vocab_size},
    {"hidden_size", &ModelConfig::hidden_size},
    {"num_hidden_layers", &ModelConfig::num_hidden_layers},
    {"num_attention_heads", &ModelConfig::num_attention_heads},
    {"head_dim", &ModelConfig::head_dim},
    {"q_lora_rank", &ModelConfig::q_lora_rank},
    {"o_groups", &ModelConfig::o_groups},
    {"o_lora_rank", &ModelConfig::o_lora_rank},
    {"sliding_window", &ModelConfig::sliding_window},
    {"index_n_heads", &ModelConfig::index_n_heads},
    {"index_head_dim", &ModelConfig::index_head_dim},
    {"index_topk", &ModelConfig::index_topk},
    {"hc_mult", &ModelConfig::hc_mult},
    // Iterations of every token's Sinkhorn loop: V4 uses 20; 10^12 ran for days.
    {"hc_sinkhorn_iters", &ModelConfig::hc_sinkhorn_iters, 1, false, 1000},
    {"n_routed_experts", &ModelConfig::n_routed_experts},
    {"num_experts_per_tok", &ModelConfig::num_experts_per_tok},
    {"moe_intermediate_size", &ModelConfig::moe_intermediate_size},
    // Added to a mean square before its root: 0 divides by zero on a zero row, and an epsilon
    // of 1 or more would outweigh the activations it normalises (V4: 1e-6).
    {"rms_norm_eps", &ModelConfig::rms_norm_eps, 0, true, 1},
    {"hc_eps", &ModelConfig::hc_eps, 0, false, 1},
    {"swiglu_limit", &ModelConfig::swiglu_limit, 0, true, kInf},  // 0 would zero the gate path
    {"routed_scaling_factor", &ModelConfig::routed_scaling_factor, 0, true, kInf},
    {"initializer_range", &ModelConfig::initializer_range, 0, false, kInf},  // synth's standard deviation
    {"max_position_embeddings", &ModelConfig::max_position_embeddings},
};

// The range of a key as a message says it: "> 0", ">= 1", "in (0, 1]", "in [1, 1000]".
std::string range_text(const ScalarKey& k) {
  if (k.max == kInf) return fmt::format("{} {}", k.min_excluded ? ">" : ">=", k.min);
  return fmt::format("in {}{}, {}]", k.min_excluded ? "(" : "[", k.min, k.max);
}

void check_scalar_ranges(const ModelConfig& c, const std::string& src) {
  for (const ScalarKey& k : kScalarKeys) {
    const double v = std::visit([&](auto field) { return static_cast<double>(c.*field); }, k.field);
    if ((k.min_excluded ? v > k.min : v >= k.min) && v <= k.max) continue;  // NaN fails both
    const std::string shown = std::visit([&](auto field) { return fmt::format("{}", c.*field); }, k.field);
    input_error("{}: {} is {}, it must be {}", src, k.key, shown, range_text(k));
  }
}

void read_scalar_keys(const json& j, ModelConfig& c, const std::string& src) {
  for (const ScalarKey& k : kScalarKeys)
    std::visit([&](auto field) { c.*field = get_or(j, k.key, c.*field, src); }, k.field);
}

// Settings this tool implements one way only: anything else would be a different model.
void refuse_other_models(const json& j, const std::string& src) {
  if (auto s = string_or(j, "scoring_func", "sqrtsoftplus", src); s != "sqrtsoftplus")
    input_error("{}: scoring_func '{}' is not supported (DeepSeek-V4 uses sqrtsoftplus)", src, s);
  if (auto a = string_or(j, "hidden_act", "silu", src); a != "silu")
    input_error("{}: hidden_act '{}' is not supported (DeepSeek-V4 uses silu)", src, a);
  if (bool_or(j, "mlp_bias", false, src)) input_error("{}: mlp_bias=true is not supported", src);
  if (bool_or(j, "attention_bias", false, src)) input_error("{}: attention_bias=true is not supported", src);
  if (j.contains("n_shared_experts") && !j["n_shared_experts"].is_null() && get_or<std::int64_t>(j, "n_shared_experts", 1, src) != 1)
    input_error("{}: n_shared_experts must be 1 (transformers always builds exactly one)", src);
}

// Rotary dimension: partial_rotary_factor, or the legacy qk_rope_head_dim.
std::int64_t read_rope_dim(const json& j, std::int64_t head_dim, const std::string& src) {
  const bool has_prf = j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null();
  const bool has_qkr = j.contains("qk_rope_head_dim") && !j["qk_rope_head_dim"].is_null();
  if (has_prf) {
    double f = get_or<double>(j, "partial_rotary_factor", 0.125, src);
    // A fraction of head_dim: checked before the cast below (1e300 was out of an int64's range).
    if (!(f > 0 && f <= 1))
      input_error("{}: partial_rotary_factor is {}, it must be in (0, 1] (the rotary fraction of head_dim)", src,
                  j["partial_rotary_factor"].dump());
    double r = f * static_cast<double>(head_dim);
    const auto rope_dim = static_cast<std::int64_t>(r);  // HF: int(head_dim * factor)
    if (has_qkr && get_or<std::int64_t>(j, "qk_rope_head_dim", 0, src) != rope_dim)
      input_error("{}: qk_rope_head_dim={} disagrees with partial_rotary_factor*head_dim={}", src,
                  j["qk_rope_head_dim"].dump(), rope_dim);
    return rope_dim;
  }
  if (has_qkr) return get_or<std::int64_t>(j, "qk_rope_head_dim", 64, src);
  return head_dim / 8;  // HF default factor 64/512
}

// Compression rates: compress_rates dict, or legacy compress_rate_csa / compress_rate_hca.
void read_compress_rates(const json& j, ModelConfig& c, const std::string& src) {
  if (auto it = j.find("compress_rates"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) input_error("{}: compress_rates must be an object", src);
    for (auto& [k, v] : it->items()) {
      if (!v.is_number_integer()) input_error("{}: compress_rates['{}'] must be an integer", src, k);
      if (k == "compressed_sparse_attention") c.csa_rate = v.get<std::int64_t>();
      else if (k == "heavily_compressed_attention") c.hca_rate = v.get<std::int64_t>();
      else input_error("{}: unknown key '{}' in compress_rates", src, k);
    }
  }
  c.csa_rate = get_or<std::int64_t>(j, "compress_rate_csa", c.csa_rate, src);
  c.hca_rate = get_or<std::int64_t>(j, "compress_rate_hca", c.hca_rate, src);
}

// Layer schedule: layer_types, or legacy compress_ratios, or HF's default (V4-Pro) schedule.
std::vector<LayerType> read_layer_types(const json& j, std::int64_t L, const std::string& src) {
  std::vector<LayerType> types;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) input_error("{}: layer_types must be a list", src);
    for (auto& v : *it) {
      if (!v.is_string()) input_error("{}: layer_types holds a non-string entry {}", src, v.dump());
      types.push_back(parse_layer_type(v.get<std::string>(), src));
    }
    if (static_cast<std::int64_t>(types.size()) != L)
      input_error("{}: layer_types has {} entries, num_hidden_layers is {}", src, types.size(), L);
  } else if (auto cr = j.find("compress_ratios"); cr != j.end() && !cr->is_null()) {
    if (!cr->is_array() || static_cast<std::int64_t>(cr->size()) < L)
      input_error("{}: compress_ratios must be a list of at least num_hidden_layers={} entries", src, L);
    for (std::int64_t i = 0; i < L; ++i) {
      const auto& v = (*cr)[static_cast<std::size_t>(i)];
      if (!v.is_number_integer()) input_error("{}: compress_ratios[{}] is not an integer", src, i);
      auto r = v.get<std::int64_t>();
      if (r == 0) types.push_back(LayerType::sliding);
      else if (r == 4) types.push_back(LayerType::csa);
      else if (r == 128) types.push_back(LayerType::hca);
      else input_error("{}: compress_ratios[{}] = {} (allowed: 0, 4, 128)", src, i, r);
    }
  } else {
    for (std::int64_t i = 0; i < L; ++i) types.push_back(i < 2 || i % 2 == 0 ? LayerType::hca : LayerType::csa);
  }
  return types;
}

// MoE schedule: mlp_layer_types, or legacy num_hash_layers, or the first 3 hash-routed.
std::vector<MlpType> read_mlp_types(const json& j, std::int64_t L, const std::string& src) {
  std::vector<MlpType> types;
  if (auto it = j.find("mlp_layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) input_error("{}: mlp_layer_types must be a list", src);
    for (auto& v : *it) {
      auto s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "hash_moe") types.push_back(MlpType::hash_moe);
      else if (s == "moe") types.push_back(MlpType::moe);
      else input_error("{}: unknown mlp layer type '{}' in mlp_layer_types", src, s);
    }
    if (static_cast<std::int64_t>(types.size()) != L)
      input_error("{}: mlp_layer_types has {} entries, num_hidden_layers is {}", src, types.size(), L);
  } else {
    std::int64_t nh = get_or<std::int64_t>(j, "num_hash_layers", 3, src);
    if (nh < 0) input_error("{}: num_hash_layers must be >= 0", src);
    for (std::int64_t i = 0; i < L; ++i) types.push_back(i < nh ? MlpType::hash_moe : MlpType::moe);
  }
  return types;
}

// RoPE tables. `main` is always plain; `compress` takes YaRN from rope_scaling or from
// rope_parameters.compress.
void read_rope_tables(const json& j, ModelConfig& c, const std::string& src) {
  c.rope_main = RopeTable{get_or<double>(j, "rope_theta", 10000.0, src)};
  c.rope_compress = RopeTable{get_or<double>(j, "compress_rope_theta", 160000.0, src)};
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    if (auto m = rp->find("main"); m != rp->end() && m->is_object()) {
      c.rope_main = RopeTable{get_or<double>(*m, "rope_theta", c.rope_main.theta, src)};
      if (string_or(*m, "rope_type", "default", src) != "default")
        input_error("{}: rope_parameters.main must be plain RoPE (rope_type default)", src);
    }
    if (auto m = rp->find("compress"); m != rp->end() && m->is_object())
      c.rope_compress = parse_yarn(*m, get_or<double>(*m, "rope_theta", c.rope_compress.theta, src),
                                   c.max_position_embeddings, src, "rope_parameters.compress");
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object())
    c.rope_compress = parse_yarn(*rs, c.rope_compress.theta, c.max_position_embeddings, src, "rope_scaling");
}

}  // namespace

ModelConfig parse_config(const json& j, const std::string& src) {
  if (!j.is_object()) input_error("{}: config is not a JSON object", src);
  const std::string mt = string_or(j, "model_type", "", src);
  if (mt != "deepseek_v4")
    input_error("{}: model_type is '{}', expected 'deepseek_v4'", src, mt);
  ModelConfig c;
  read_scalar_keys(j, c, src);
  refuse_other_models(j, src);
  c.rope_dim = read_rope_dim(j, c.head_dim, src);
  read_compress_rates(j, c, src);
  const auto L = c.num_hidden_layers;
  if (L <= 0) input_error("{}: num_hidden_layers must be > 0", src);
  // Checked before the schedule is built from it (10^12 layers grew memory until killed).
  constexpr std::int64_t kMaxLayers = 1024;  // V4-Flash has 43, V4-Pro 61
  if (L > kMaxLayers) input_error("{}: num_hidden_layers is {}, beyond the {} tdiff reads", src, L, kMaxLayers);
  c.layer_types = read_layer_types(j, L, src);
  c.mlp_types = read_mlp_types(j, L, src);
  read_rope_tables(j, c, src);
  c.validate(src);
  return c;
}

void ModelConfig::validate(const std::string& src) const {
  check_scalar_ranges(*this, src);
  for (const auto& [key, v] : {std::pair{"compress_rates.compressed_sparse_attention", csa_rate},
                               std::pair{"compress_rates.heavily_compressed_attention", hca_rate}})
    if (v <= 0) input_error("{}: {} must be > 0 (got {})", src, key, v);
  check_weight_sizes(*this, src);
  if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > head_dim)
    input_error("{}: rotary dims r = {} must be even and in (0, head_dim={}]", src, rope_dim, head_dim);
  if (rope_dim > index_head_dim)
    input_error("{}: rotary dims r = {} exceed index_head_dim = {}", src, rope_dim, index_head_dim);
  if (num_attention_heads % o_groups != 0)
    input_error("{}: num_attention_heads={} is not divisible by o_groups={}", src, num_attention_heads, o_groups);
  if (num_experts_per_tok > n_routed_experts)
    input_error("{}: num_experts_per_tok={} exceeds n_routed_experts={}", src, num_experts_per_tok, n_routed_experts);
  if (!(rope_main.theta > 1) || !(rope_compress.theta > 1)) input_error("{}: rope_theta values must be > 1", src);
  if (static_cast<std::int64_t>(layer_types.size()) != num_hidden_layers ||
      static_cast<std::int64_t>(mlp_types.size()) != num_hidden_layers)
    input_error("{}: layer schedules do not cover num_hidden_layers={}", src, num_hidden_layers);
}

void ModelConfig::truncate_layers(std::int64_t k) {
  if (k <= 0 || k > num_hidden_layers)
    input_error("--layers {} is outside 1..{}", k, num_hidden_layers);
  num_hidden_layers = k;
  layer_types.resize(static_cast<std::size_t>(k));
  mlp_types.resize(static_cast<std::size_t>(k));
}

void ModelConfig::select_layers(const std::string& spec) {
  // "K": the first K layers; otherwise a comma-separated list of layer indices and ranges.
  const bool count_only = !spec.empty() && spec.find_first_not_of("0123456789") == std::string::npos;
  if (count_only) {
    if (spec.size() > 9) input_error("--layers {} is outside 1..{}", spec, num_hidden_layers);
    truncate_layers(std::stoll(spec));
    return;
  }
  std::vector<std::int64_t> keep;
  auto number = [&](const std::string& t) -> std::int64_t {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
      input_error("--layers '{}': '{}' is not a layer index (give K, or a list like 0-3 or 2,3)", spec, t);
    const std::int64_t v = std::stoll(t);
    if (v >= num_hidden_layers) input_error("--layers '{}': layer {} is outside 0..{}", spec, v, num_hidden_layers - 1);
    return v;
  };
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const std::size_t dash = item.find('-');
    const std::int64_t lo = number(item.substr(0, dash)), hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) input_error("--layers '{}': range {} runs backwards", spec, item);
    for (std::int64_t l = lo; l <= hi; ++l) {
      if (!keep.empty() && l <= keep.back()) input_error("--layers '{}': layers must be given in increasing order, once", spec);
      keep.push_back(l);
    }
    at = comma + 1;
  }
  std::vector<LayerType> lt;
  std::vector<MlpType> mt;
  for (std::int64_t l : keep) {
    lt.push_back(layer_types[static_cast<std::size_t>(l)]);
    mt.push_back(mlp_types[static_cast<std::size_t>(l)]);
  }
  layer_types = std::move(lt), mlp_types = std::move(mt);
  num_hidden_layers = static_cast<std::int64_t>(keep.size());
}

json parse_config_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // syntax errors, and numbers out of range (1e999)
    input_error("{}: not valid JSON ({})", source, e.what());
  }
}

ModelConfig parse_config_text(const std::string& text, const std::string& source) {
  const json j = parse_config_json(text, source);
  try {
    return parse_config(j, source);
  } catch (const json::exception& e) {  // a json accessor parse_config did not guard: still the input's fault
    input_error("{}: {}", source, e.what());
  }
}

ModelConfig load_config(const std::string& path) { return parse_config_text(read_text_file(path), path); }

json config_to_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = c.head_dim;
  j["partial_rotary_factor"] = static_cast<double>(c.rope_dim) / static_cast<double>(c.head_dim);
  j["qk_rope_head_dim"] = c.rope_dim;
  j["q_lora_rank"] = c.q_lora_rank;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["sliding_window"] = c.sliding_window;
  std::vector<std::string> lt, mt;
  for (auto t : c.layer_types) lt.emplace_back(layer_type_name(t));
  for (auto t : c.mlp_types) mt.emplace_back(t == MlpType::hash_moe ? "hash_moe" : "moe");
  j["layer_types"] = lt;
  j["mlp_layer_types"] = mt;
  j["compress_rates"] = {{"compressed_sparse_attention", c.csa_rate}, {"heavily_compressed_attention", c.hca_rate}};
  j["rope_theta"] = c.rope_main.theta;
  j["compress_rope_theta"] = c.rope_compress.theta;
  if (c.rope_compress.yarn)
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", c.rope_compress.factor},
                         {"original_max_position_embeddings", c.rope_compress.original_max_position_embeddings},
                         {"beta_fast", c.rope_compress.beta_fast}, {"beta_slow", c.rope_compress.beta_slow}};
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["scoring_func"] = "sqrtsoftplus";
  j["norm_topk_prob"] = true;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["swiglu_limit"] = c.swiglu_limit;
  j["hidden_act"] = "silu";
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "float32";
  return j;
}

}  // namespace tdiff
