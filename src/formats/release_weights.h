#pragma once
// A model folder in DeepSeek's release layout (formats/release_format.h), read under HF names:
// every parameter the config implies is found under its release name, checked (dtype, shape,
// scale shape) and dequantised exactly to float64 on request. Used by WeightStore when
// a folder holds `embed.weight` instead of `model.embed_tokens.weight`.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "formats/release_format.h"
#include "formats/safetensors.h"

namespace tdiff {

struct WeightSpec;  // formats/weight_spec.h

// Whether `files` is in the release layout (its embedding is `embed.weight`).
bool is_release_layout(const ModelWeights& files);

class ReleaseWeights {
 public:
  // `files` must outlive this object.
  explicit ReleaseWeights(const ModelWeights& files) : files_(files) {}

  // Checks that the release holds HF parameter `hf` with `spec`'s shape: its tensors, their
  // dtypes and their scales' shapes. InputError naming the folder and the release tensor.
  void check(const std::string& hf, const WeightSpec& spec) const;
  // Checks the storage the config states against the tensors (model-spec §2.6), once check()
  // passed for every parameter of `specs`: quantization_config (quant_method fp8, fmt e4m3,
  // scale_fmt ue8m0, weight_block_size [128, 128]) present exactly when some linear has block
  // scales, and expert_dtype fp4 exactly when the routed experts are FP4. `config` is the
  // folder's config.json, `source` its path for the one-line InputError.
  void check_quantization(const nlohmann::json& config, const std::string& source,
                          const std::map<std::string, WeightSpec>& specs) const;
  // The parameter in float64 (exact); integer parameters as i64.
  Tensor f64(const std::string& hf, const WeightSpec& spec) const;
  Tensor i64(const std::string& hf) const;
  // The release tensor of `hf` when it is stored unquantised in one piece; undefined otherwise.
  Tensor stored(const std::string& hf) const;
  // A quantised release tensor as stored (views into the mapping), and its name for errors:
  // FP8 codes f8_e4m3 [O, K] with scales u8 (E8M0) or f32 [ceil(O/128), ceil(K/128)]; FP4
  // codes u8 [R, ceil(K/2)] with scales u8 (E8M0) [R, ceil(K/32)].
  struct QuantParts {
    Tensor codes, scale;
    std::string what;
  };
  // How HF parameter `hf` is stored: fp8 or fp4 when quantised (routed experts: when expert
  // 0's parts are; check() refuses a release that quantises only some), else plain.
  ReleaseFormat stored_format(const std::string& hf) const;
  QuantParts fp8_parts(const std::string& hf) const;
  // One routed expert's FP4 parts in the order they stack along the HF tensor's rows (w1 and
  // w3 of gate_up_proj, w2 of down_proj).
  std::vector<QuantParts> fp4_parts(const std::string& hf, std::int64_t expert) const;
  // One routed expert's slice of a stacked expert parameter in float64: [2I, D] of
  // gate_up_proj ([w1; w3]) or [D, I] of down_proj (w2), converting only that expert.
  Tensor expert_f64(const std::string& hf, const WeightSpec& spec, std::int64_t expert) const;
  // Rows [r0, r1) of that slice, columns [c0, c1) (c1 < 0: all), written to dst ([r1 - r0,
  // c1 - c0]), converting only those; the rows' pages are released once their last column is.
  void expert_rows_f64(const std::string& hf, const WeightSpec& spec, std::int64_t expert, std::int64_t r0,
                       std::int64_t r1, double* dst, std::int64_t c0 = 0, std::int64_t c1 = -1) const;

 private:
  std::string what(const std::string& release) const;  // "<dir>: tensor 'X'" for errors
  const TensorInfo& need(const std::string& release) const;
  void check_fp8(const std::string& release, std::int64_t O, std::int64_t K) const;
  void check_fp4(const std::string& release, std::int64_t O, std::int64_t K) const;

  const ModelWeights& files_;
};

}  // namespace tdiff
