#include "synth/synth_profile.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "synth/synth.h"

namespace tdiff {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_indexer(const std::string& name) { return name.find("indexer.") != std::string::npos; }

// The attention keys' norm (the compressor's too, its entries join the same softmax), not the
// indexer's (its scores pass a ReLU and choose entries; they are no attention logits).
bool is_key_norm(const std::string& name) { return ends_with(name, "kv_norm.weight") && !is_indexer(name); }

// A mean rounded to 16 significant bits, as synth.cpp rounds standard deviations, so that
// mean + std z is exact in double on every platform.
double portable(double x) {
  int e;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 16)), e - 16);
}

}  // namespace

const std::vector<std::string>& synth_profile_names() {
  static const std::vector<std::string> names{"default", "trained"};
  return names;
}

SynthProfile parse_synth_profile(const std::string& name) {
  if (name == "default") return SynthProfile::standard;
  if (name == "trained") return SynthProfile::trained;
  input_error("unknown synth profile '{}' (known: {})", name, fmt::join(synth_profile_names(), ", "));
}

const char* synth_profile_name(SynthProfile p) { return p == SynthProfile::trained ? "trained" : "default"; }

std::optional<SynthDraw> trained_draw(const ModelConfig& c, const std::string& name, const std::vector<std::int64_t>& shape) {
  const double fan_in = shape.empty() ? 1.0 : static_cast<double>(shape.back());
  if (ends_with(name, "self_attn.sinks"))
    return SynthDraw{portable(std::log(static_cast<double>(c.sliding_window)) + 4.0), 1.0};
  if (ends_with(name, "self_attn.o_a_proj.weight")) {
    const double value_rms = std::sqrt(kTrainedKeyGain * kTrainedKeyGain / 4.0 + 0.75);
    return SynthDraw{0.0, 1.0 / value_rms / std::sqrt(fan_in)};
  }
  if (ends_with(name, "mlp.gate.weight")) return SynthDraw{0.0, kTrainedRouterGain / std::sqrt(fan_in)};
  if (ends_with(name, "gate.e_score_correction_bias")) return SynthDraw{0.0, kTrainedBiasStd};
  return std::nullopt;
}

std::vector<double> trained_head_gains(const ModelConfig& c, const std::string& name, std::uint64_t seed) {
  // The five gains in turn from a random start, so every layer has broad and sharp heads.
  const auto offset = static_cast<std::int64_t>(synth_hash(seed, name + "#heads") % 5);
  std::vector<double> a;
  for (std::int64_t h = 0; h < c.num_attention_heads; ++h)
    a.push_back(std::ldexp(1.0, static_cast<int>((h + offset) % 5) - 2));  // a power of two: products stay exact
  return a;
}

std::function<double(std::int64_t)> trained_scale(const ModelConfig& c, const std::string& name, std::uint64_t seed) {
  const std::int64_t d = c.head_dim, sharp = c.head_dim / 4;
  if (is_key_norm(name)) return [sharp](std::int64_t i) { return i < sharp ? kTrainedKeyGain : 1.0; };
  if (ends_with(name, "self_attn.q_b_proj.weight") && !is_indexer(name)) {
    const std::int64_t row = c.q_lora_rank;
    return [a = trained_head_gains(c, name, seed), row, d, sharp](std::int64_t i) {
      const std::int64_t r = i / row;
      return r % d < sharp ? a[static_cast<std::size_t>(r / d)] : 1.0;
    };
  }
  return {};
}

}  // namespace tdiff
