#include "formats/release_weights.h"

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/weight_spec.h"

namespace tdiff {

bool is_release_layout(const ModelWeights& files) { return files.has("embed.weight"); }

std::string ReleaseWeights::what(const std::string& release) const {
  return fmt::format("{}: tensor '{}'", files_.dir(), release);
}

const TensorInfo& ReleaseWeights::need(const std::string& release) const {
  if (!files_.has(release)) input_error("{} is missing (the config needs it)", what(release));
  return files_.info(release);
}

void ReleaseWeights::check_fp8(const std::string& release, std::int64_t O, std::int64_t K) const {
  const TensorInfo& w = need(release);
  if (w.dtype != DType::f8_e4m3)
    input_error("{} has a scale but dtype {} (FP8 weights are F8_E4M3)", what(release), w.format);
  if (w.shape != Shape{O, K})
    input_error("{} has shape {}, the config implies {}", what(release), shape_str(w.shape), shape_str(Shape{O, K}));
  const TensorInfo& s = need(scale_name(release));
  const Shape want{(O + 127) / 128, (K + 127) / 128};
  if (s.format != "F8_E8M0" && s.format != "F32")
    input_error("{} has dtype {}, expected F8_E8M0 or F32", what(scale_name(release)), s.format);
  if (s.shape != want)
    input_error("{} has shape {}, the weight needs {}", what(scale_name(release)), shape_str(s.shape), shape_str(want));
}

void ReleaseWeights::check_fp4(const std::string& release, std::int64_t O, std::int64_t K) const {
  const TensorInfo& w = need(release);
  if (w.format != "I8") input_error("{} has a scale but dtype {} (FP4 experts are packed in I8)", what(release), w.format);
  const Shape packed{O, (K + 1) / 2}, groups{O, (K + 31) / 32};
  if (w.shape != packed)
    input_error("{} has shape {}, the config implies {} (two FP4 codes a byte)", what(release), shape_str(w.shape),
                shape_str(packed));
  const TensorInfo& s = need(scale_name(release));
  if (s.format != "F8_E8M0") input_error("{} has dtype {}, expected F8_E8M0", what(scale_name(release)), s.format);
  if (s.shape != groups)
    input_error("{} has shape {}, the weight needs {}", what(scale_name(release)), shape_str(s.shape), shape_str(groups));
}

namespace {

// The release tensor of expert `e`, part `part` ("w1"): "layers.3.ffn.experts.7.w1.weight".
std::string expert_tensor(const ReleaseName& rn, std::int64_t e, const std::string& part) {
  return fmt::format("{}{}.{}.weight", rn.name, e, part);
}

ReleaseName release_of(const std::string& hf) {
  auto rn = release_name(hf);
  if (!rn) throw std::logic_error("release layout: no release name for " + hf);
  return *rn;
}

}  // namespace

void ReleaseWeights::check(const std::string& hf, const WeightSpec& spec) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format == ReleaseFormat::fp4) {
    const std::int64_t E = spec.shape.at(0), rows = spec.shape.at(1) / static_cast<std::int64_t>(rn.parts.size()),
                       K = spec.shape.at(2);
    // Every part quantised or none: a backend that keeps the experts as stored (hip) reads
    // them all one way.
    const bool quantised = files_.has(scale_name(expert_tensor(rn, 0, rn.parts.at(0))));
    for (std::int64_t e = 0; e < E; ++e)
      for (const auto& part : rn.parts) {
        const std::string t = expert_tensor(rn, e, part);
        if (files_.has(scale_name(t)) != quantised)
          input_error("{} has {} scale but expert 0's {} has {}: a release quantises all routed experts or none", what(t),
                      quantised ? "no" : "a", rn.parts.at(0), quantised ? "one" : "none");
        if (quantised) {
          check_fp4(t, rows, K);
        } else {  // an unquantised export of the experts
          const TensorInfo& w = need(t);
          if (!is_float(w.dtype) || w.shape != Shape{rows, K})
            input_error("{} is {} {}, expected a float {} or I8 FP4 codes with a scale", what(t), w.format,
                        shape_str(w.shape), shape_str(Shape{rows, K}));
        }
      }
    return;
  }
  if (files_.has(scale_name(rn.name))) {
    if (spec.shape.size() != 2) input_error("{} has a scale, but the parameter is not a matrix", what(rn.name));
    check_fp8(rn.name, spec.shape[0], spec.shape[1]);
    return;
  }
  const TensorInfo& w = need(rn.name);
  if (w.shape != spec.shape)
    input_error("{} has shape {}, the config implies {}", what(rn.name), shape_str(w.shape), shape_str(spec.shape));
  const bool is_int = w.dtype == DType::i64 || w.dtype == DType::i32;
  if (spec.integer ? !is_int : (!is_float(w.dtype) || w.dtype == DType::f8_e4m3))
    input_error("{} has dtype {}, expected {}", what(rn.name), w.format,
                spec.integer ? "an integer type" : w.dtype == DType::f8_e4m3 ? "a scale beside F8_E4M3 codes" : "a float type");
}

namespace {

// A key of quantization_config that must hold `want` when present: any other value is a storage
// format tdiff does not decode, and decoding it as this one would give another model.
void expect_quant_key(const nlohmann::json& q, const char* key, const nlohmann::json& want, const std::string& source) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null() || *it == want) return;
  input_error("{}: quantization_config.{} is {}; tdiff reads the release's {} (model-spec §2.6)", source, key,
              it->dump(), want.dump());
}

}  // namespace

void ReleaseWeights::check_quantization(const nlohmann::json& config, const std::string& source,
                                        const std::map<std::string, WeightSpec>& specs) const {
  std::string fp8, fp4, expert;  // the first FP8 tensor, the first FP4 expert, the first routed-expert parameter
  for (const auto& [hf, spec] : specs) {
    const ReleaseName rn = release_of(hf);
    const ReleaseFormat f = stored_format(hf);
    if (f == ReleaseFormat::fp8 && fp8.empty()) fp8 = rn.name;
    if (rn.format != ReleaseFormat::fp4) continue;
    const std::string t = expert_tensor(rn, 0, rn.parts.at(0));
    if (expert.empty()) expert = t;
    if (f == ReleaseFormat::fp4 && fp4.empty()) fp4 = t;
  }
  const auto q = config.find("quantization_config");
  if (q == config.end() || q->is_null()) {
    if (!fp8.empty())
      input_error("{}: no quantization_config, but tensor '{}' is FP8 with block scales (the release states it)",
                  source, fp8);
  } else {
    if (!q->is_object()) input_error("{}: quantization_config must be an object, got {}", source, q->dump());
    if (q->find("quant_method") == q->end()) input_error("{}: quantization_config has no quant_method", source);
    expect_quant_key(*q, "quant_method", "fp8", source);
    expect_quant_key(*q, "fmt", "e4m3", source);
    expect_quant_key(*q, "scale_fmt", "ue8m0", source);
    expect_quant_key(*q, "weight_block_size", nlohmann::json::array({128, 128}), source);
    if (fp8.empty())
      input_error(
          "{}: quantization_config says fp8, but no linear has a '.scale' tensor (an unquantised export "
          "has no quantization_config)",
          source);
  }
  const auto e = config.find("expert_dtype");
  if (e == config.end() || e->is_null()) return;
  if (!e->is_string()) input_error("{}: expert_dtype must be a string, got {}", source, e->dump());
  if (*e == "fp4" && fp4.empty() && !expert.empty())
    input_error("{}: expert_dtype is \"fp4\", but tensor '{}' has no scale (FP4 experts are I8 codes with a '.scale')",
                source, expert);
  if (*e != "fp4" && !fp4.empty())
    input_error("{}: expert_dtype is {}, but tensor '{}' holds FP4 codes with a scale", source, e->dump(), fp4);
}

Tensor ReleaseWeights::expert_f64(const std::string& hf, const WeightSpec& spec, std::int64_t expert) const {
  Tensor out(DType::f64, {spec.shape.at(1), spec.shape.at(2)});
  expert_rows_f64(hf, spec, expert, 0, spec.shape.at(1), out.data<double>());
  return out;
}

void ReleaseWeights::expert_rows_f64(const std::string& hf, const WeightSpec& spec, std::int64_t expert, std::int64_t r0,
                                     std::int64_t r1, double* dst, std::int64_t c0, std::int64_t c1) const {
  const ReleaseName rn = release_of(hf);
  const std::int64_t rows = spec.shape.at(1) / static_cast<std::int64_t>(rn.parts.size()), K = spec.shape.at(2);
  if (c1 < 0) c1 = K;
  for (std::size_t p = 0; p < rn.parts.size(); ++p) {  // the parts [r0, r1) overlaps, each in its own tensor
    const std::int64_t p0 = static_cast<std::int64_t>(p) * rows, a = std::max(r0, p0), b = std::min(r1, p0 + rows);
    if (a >= b) continue;
    const std::string t = expert_tensor(rn, expert, rn.parts[p]);
    double* out = dst + (a - r0) * (c1 - c0);
    const Tensor codes = files_.tensor(t).rows(a - p0, b - p0);
    const bool last = c1 == K;  // each tile is read once per stage: its pages are dropped once converted
    if (files_.has(scale_name(t))) {
      const Tensor scale = files_.tensor(scale_name(t)).rows(a - p0, b - p0);
      dequantize_fp4(codes, scale, K, out, what(t), c0, c1);
      if (last) release_resident_pages(scale.raw(), scale.nbytes());
    } else {
      codes.cols_to_f64(c0, c1, out);
    }
    if (last) release_resident_pages(codes.raw(), codes.nbytes());
  }
}

Tensor ReleaseWeights::f64(const std::string& hf, const WeightSpec& spec) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format == ReleaseFormat::fp4) {
    Tensor out(DType::f64, spec.shape);
    const std::int64_t per_expert = spec.shape.at(1) * spec.shape.at(2);
    for (std::int64_t e = 0; e < spec.shape.at(0); ++e) {
      const Tensor x = expert_f64(hf, spec, e);
      std::memcpy(out.data<double>() + e * per_expert, x.data<double>(), static_cast<std::size_t>(per_expert) * sizeof(double));
    }
    return out;
  }
  if (files_.has(scale_name(rn.name)))
    return dequantize_fp8(files_.tensor(rn.name), files_.tensor(scale_name(rn.name)), what(rn.name));
  const Tensor t = files_.tensor(rn.name);
  return t.dtype() == DType::f64 ? t.clone() : t.to(DType::f64);
}

Tensor ReleaseWeights::stored(const std::string& hf) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format == ReleaseFormat::fp4 || files_.has(scale_name(rn.name))) return Tensor{};
  return files_.tensor(rn.name);
}

ReleaseFormat ReleaseWeights::stored_format(const std::string& hf) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format == ReleaseFormat::fp4)
    return files_.has(scale_name(expert_tensor(rn, 0, rn.parts.at(0)))) ? ReleaseFormat::fp4 : ReleaseFormat::plain;
  return files_.has(scale_name(rn.name)) ? ReleaseFormat::fp8 : ReleaseFormat::plain;
}

std::vector<ReleaseWeights::QuantParts> ReleaseWeights::fp4_parts(const std::string& hf, std::int64_t expert) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format != ReleaseFormat::fp4) throw std::logic_error("release layout: not a routed expert parameter: " + hf);
  std::vector<QuantParts> parts;
  for (const auto& part : rn.parts) {
    const std::string t = expert_tensor(rn, expert, part);
    parts.push_back({files_.tensor(t), files_.tensor(scale_name(t)), what(t)});
  }
  return parts;
}

ReleaseWeights::QuantParts ReleaseWeights::fp8_parts(const std::string& hf) const {
  const ReleaseName rn = release_of(hf);
  if (rn.format == ReleaseFormat::fp4 || !files_.has(scale_name(rn.name)))
    throw std::logic_error("release layout: not an FP8 parameter: " + hf);
  return {files_.tensor(rn.name), files_.tensor(scale_name(rn.name)), what(rn.name)};
}

Tensor ReleaseWeights::i64(const std::string& hf) const {
  const Tensor t = files_.tensor(release_of(hf).name);
  return t.dtype() == DType::i64 ? t.clone() : t.to(DType::i64);
}

}  // namespace tdiff
