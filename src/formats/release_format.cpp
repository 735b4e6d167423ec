#include "formats/release_format.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "base/dtype.h"
#include "base/error.h"

namespace tdiff {

namespace {

// One name pair: the HF name (after "model.layers.{i}." for layer tensors, whole otherwise)
// and the release name (after "layers.{i}."), with the release's storage format. This table is
// the spec's sections 2.1-2.5 and both directions of the mapping read it.
struct NamePair {
  const char* hf;
  const char* release;
  ReleaseFormat format;
};

constexpr auto P = ReleaseFormat::plain, F8 = ReleaseFormat::fp8, F4 = ReleaseFormat::fp4;

constexpr NamePair kTopLevel[] = {
    {"model.embed_tokens.weight", "embed.weight", P},
    {"model.hc_head.hc_fn", "hc_head_fn", P},
    {"model.hc_head.hc_base", "hc_head_base", P},
    {"model.hc_head.hc_scale", "hc_head_scale", P},
    {"model.norm.weight", "norm.weight", P},
    {"lm_head.weight", "head.weight", P},
};

constexpr NamePair kLayer[] = {
    {"attn_hc.fn", "hc_attn_fn", P},
    {"attn_hc.base", "hc_attn_base", P},
    {"attn_hc.scale", "hc_attn_scale", P},
    {"ffn_hc.fn", "hc_ffn_fn", P},
    {"ffn_hc.base", "hc_ffn_base", P},
    {"ffn_hc.scale", "hc_ffn_scale", P},
    {"input_layernorm.weight", "attn_norm.weight", P},
    {"post_attention_layernorm.weight", "ffn_norm.weight", P},
    {"self_attn.q_a_proj.weight", "attn.wq_a.weight", F8},
    {"self_attn.q_a_norm.weight", "attn.q_norm.weight", P},
    {"self_attn.q_b_proj.weight", "attn.wq_b.weight", F8},
    {"self_attn.kv_proj.weight", "attn.wkv.weight", F8},
    {"self_attn.kv_norm.weight", "attn.kv_norm.weight", P},
    {"self_attn.o_a_proj.weight", "attn.wo_a.weight", F8},
    {"self_attn.o_b_proj.weight", "attn.wo_b.weight", F8},
    {"self_attn.sinks", "attn.attn_sink", P},
    {"self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight", P},
    {"self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight", P},
    {"self_attn.compressor.position_bias", "attn.compressor.ape", P},
    {"self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight", P},
    {"self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight", P},
    {"self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight", P},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape", P},
    {"self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight", P},
    {"self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight", F8},
    {"self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight", P},
    {"mlp.gate.weight", "ffn.gate.weight", P},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias", P},
    {"mlp.gate.tid2eid", "ffn.gate.tid2eid", P},
    {"mlp.experts.gate_up_proj", "ffn.experts.", F4},
    {"mlp.experts.down_proj", "ffn.experts.", F4},
    {"mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight", F8},
    {"mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight", F8},
    {"mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight", F8},
};

// "<prefix><digits>.<rest>" -> {digits, rest}.
std::optional<std::pair<std::string, std::string>> split_layer(const std::string& name, const std::string& prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  std::size_t i = prefix.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == prefix.size() || i >= name.size() || name[i] != '.') return std::nullopt;
  return std::pair{name.substr(prefix.size(), i - prefix.size()), name.substr(i + 1)};
}

std::vector<std::string> expert_parts(const std::string& hf_rest) {
  return hf_rest == "mlp.experts.gate_up_proj" ? std::vector<std::string>{"w1", "w3"} : std::vector<std::string>{"w2"};
}

}  // namespace

std::optional<ReleaseName> release_name(const std::string& hf) {
  for (const auto& p : kTopLevel)
    if (hf == p.hf) return ReleaseName{p.format, p.release, {}};
  const auto layer = split_layer(hf, "model.layers.");
  if (!layer) return std::nullopt;
  const auto& [index, rest] = *layer;
  for (const auto& p : kLayer) {
    if (rest != p.hf) continue;
    ReleaseName r{p.format, "layers." + index + "." + p.release, {}};
    if (p.format == ReleaseFormat::fp4) r.parts = expert_parts(rest);
    return r;
  }
  return std::nullopt;
}

std::optional<std::string> hf_name(const std::string& release) {
  for (const auto& p : kTopLevel)
    if (release == p.release) return std::string(p.hf);
  const auto layer = split_layer(release, "layers.");
  if (!layer) return std::nullopt;
  const auto& [index, rest] = *layer;
  const std::string hf_prefix = "model.layers." + index + ".";
  // Routed experts: "ffn.experts.{e}.w1.weight" (w1/w3 -> gate_up_proj, w2 -> down_proj).
  if (const auto expert = split_layer(rest, "ffn.experts.")) {
    const std::string& part = expert->second;
    if (part == "w1.weight" || part == "w3.weight") return hf_prefix + "mlp.experts.gate_up_proj";
    if (part == "w2.weight") return hf_prefix + "mlp.experts.down_proj";
    return std::nullopt;
  }
  for (const auto& p : kLayer)
    if (p.format != ReleaseFormat::fp4 && rest == p.release) return hf_prefix + p.hf;
  return std::nullopt;
}

std::string scale_name(const std::string& weight_name) {
  constexpr std::string_view suffix = ".weight";
  if (weight_name.ends_with(suffix)) return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
  return weight_name + ".scale";
}

double e8m0_value(std::uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(e) - 127);
}

double e2m1_value(std::uint8_t code) {
  static constexpr double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double v = kMagnitude[code & 7u];
  return code & 8u ? -v : v;
}

std::uint8_t e2m1_code(double x) {
  // The midpoints between neighbouring magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}; a tie goes to
  // the even code (mantissa bit 0), so `<=` below an even code's upper midpoint and `<` below
  // an odd one's. Beyond 5 (and for infinity) it saturates at 6; NaN gives 0.
  const double a = std::fabs(x);
  std::uint8_t c;
  if (!(a > 0.25)) c = 0;  // NaN too
  else if (a < 0.75) c = 1;
  else if (a <= 1.25) c = 2;
  else if (a < 1.75) c = 3;
  else if (a <= 2.5) c = 4;
  else if (a < 3.5) c = 5;
  else if (a <= 5.0) c = 6;
  else c = 7;
  return std::signbit(x) && c != 0 ? static_cast<std::uint8_t>(c | 8u) : c;
}

std::uint8_t e8m0_exponent_for(double amax, double format_max) {
  if (!(amax > 0)) return 127;
  // Smallest e with amax / 2^(e - 127) <= format_max.
  int e = static_cast<int>(std::ceil(std::log2(amax / format_max))) + 127;
  while (e > 0 && amax / std::ldexp(1.0, e - 1 - 127) <= format_max) --e;  // log2 rounding, downwards
  while (e < 254 && amax / std::ldexp(1.0, e - 127) > format_max) ++e;     // and upwards
  return static_cast<std::uint8_t>(std::clamp(e, 0, 254));
}

// Checked before any parallel loop reads them (an exception must not leave an OpenMP region).
std::vector<double> scale_values(const Tensor& t, const std::string& what) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double s = t.dtype() == DType::f32 ? static_cast<double>(t.data<float>()[i]) : e8m0_value(t.data<std::uint8_t>()[i]);
    if (!std::isfinite(s) || s <= 0)
      input_error("{}: scale [{}, {}] is {} (a scale must be finite and positive)", what, i / t.dim(1), i % t.dim(1), s);
    v[static_cast<std::size_t>(i)] = s;
  }
  return v;
}

namespace {

void check_scale(const Tensor& scale, std::int64_t rows, std::int64_t cols, bool f32_allowed, const std::string& what) {
  const bool dtype_ok = scale.dtype() == DType::u8 || (f32_allowed && scale.dtype() == DType::f32);
  if (!dtype_ok)
    input_error("{}: scale has dtype {}, expected F8_E8M0{}", what, dtype_name(scale.dtype()), f32_allowed ? " or F32" : "");
  if (scale.rank() != 2 || scale.dim(0) != rows || scale.dim(1) != cols)
    input_error("{}: scale has shape {}, the weight needs {}", what, shape_str(scale.shape()), shape_str(Shape{rows, cols}));
}

// For a >= 0, b > 0; no a + b - 1 that overflows for a shape's extent near 2^63 (a [0, 2^63 - 1]
// weight holds no bytes, so the file's size check lets it through).
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }

}  // namespace

Tensor dequantize_fp8(const Tensor& codes, const Tensor& scale, const std::string& what) {
  if (codes.dtype() != DType::f8_e4m3 || codes.rank() != 2)
    input_error("{}: FP8 weight must be a 2-D F8_E4M3 tensor (got {} {})", what, dtype_name(codes.dtype()),
                shape_str(codes.shape()));
  const std::int64_t O = codes.dim(0), K = codes.dim(1);
  check_scale(scale, ceil_div(O, 128), ceil_div(K, 128), true, what);
  // The 256 code values once (NaN codes stay NaN and are refused below).
  double lut[256];
  for (int b = 0; b < 256; ++b) lut[b] = f8e4m3_value(static_cast<std::uint8_t>(b));
  Tensor out(DType::f64, {O, K});
  const auto* c = reinterpret_cast<const std::uint8_t*>(codes.raw());
  double* o = out.data<double>();
  const std::vector<double> sc = scale_values(scale, what);
  const std::int64_t scale_cols = scale.dim(1);
  bool nan = false;
#pragma omp parallel for schedule(static) reduction(|| : nan) if (O * K > (std::int64_t{1} << 20))
  for (std::int64_t r = 0; r < O; ++r) {
    for (std::int64_t j = 0; j * 128 < K; ++j) {
      const double s = sc[static_cast<std::size_t>((r / 128) * scale_cols + j)];
      for (std::int64_t k = j * 128; k < std::min(K, (j + 1) * 128); ++k) {
        const double v = lut[c[r * K + k]];
        nan = nan || std::isnan(v);
        o[r * K + k] = v * s;
      }
    }
  }
  if (nan) {
    for (std::int64_t i = 0; i < O * K; ++i)
      if (std::isnan(lut[c[i]])) input_error("{}: element [{}, {}] is an FP8 NaN code (0x{:02X})", what, i / K, i % K, c[i]);
  }
  return out;
}

void dequantize_fp4(const Tensor& codes, const Tensor& scale, std::int64_t K, double* out, const std::string& what,
                    std::int64_t c0, std::int64_t c1) {
  if (codes.dtype() != DType::u8 || codes.rank() != 2 || codes.dim(1) != ceil_div(K, 2))
    input_error("{}: FP4 weight must be 2-D I8 [rows, {}] (two codes a byte for {} columns), got {} {}", what,
                ceil_div(K, 2), K, dtype_name(codes.dtype()), shape_str(codes.shape()));
  if (c1 < 0) c1 = K;
  if (c0 < 0 || c0 % 2 != 0 || c1 < c0 || c1 > K)
    throw std::logic_error(fmt::format("{}: FP4 columns [{}, {}) of {}", what, c0, c1, K));
  const std::int64_t O = codes.dim(0), packed = codes.dim(1), W = c1 - c0;
  check_scale(scale, O, ceil_div(K, 32), false, what);
  const auto* c = codes.data<std::uint8_t>();
  const std::vector<double> sc = scale_values(scale, what);
  const std::int64_t groups = scale.dim(1);
#pragma omp parallel for schedule(static) if (O * W > (std::int64_t{1} << 20))
  for (std::int64_t r = 0; r < O; ++r) {
    for (std::int64_t g = c0 / 32; g * 32 < c1; ++g) {
      const double s = sc[static_cast<std::size_t>(r * groups + g)];
      for (std::int64_t k = std::max(c0, g * 32); k < std::min(c1, (g + 1) * 32); ++k) {
        const std::uint8_t byte = c[r * packed + k / 2];
        const auto code = static_cast<std::uint8_t>(k % 2 == 0 ? byte & 0x0Fu : byte >> 4);  // low nibble: even column
        out[r * W + k - c0] = e2m1_value(code) * s;
      }
    }
  }
}

}  // namespace tdiff
