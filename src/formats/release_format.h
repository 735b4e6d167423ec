#pragma once
// DeepSeek's release layout (model-spec §2.6 and 2.7): tensor names, the FP8 and FP4
// storage formats, and their exact dequantisation.
//
//   FP8 linear  W [O, K]:  codes F8_E4M3 [O, K], scale F8_E8M0 (or F32) [ceil(O/128), ceil(K/128)]
//                          W[o, k] = e4m3(code[o, k]) * 2^(e[o/128, k/128] - 127)
//   FP4 expert  W [O, K]:  codes I8 [O, ceil(K/2)] (low nibble = even column), scale F8_E8M0 [O, ceil(K/32)]
//                          W[o, k] = e2m1(code[o, k]) * 2^(e[o, k/32] - 127)
//   e2m1 codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8..15 their negatives.
//   e8m0 e = 0..254 means 2^(e - 127); 0xFF is NaN.
// A tensor `X.weight` with a sibling `X.scale` is quantised (FP8 when the codes are F8_E4M3,
// FP4 when they are I8); one without is stored at full precision. Every product above is exact
// in float64 (a 4-bit significand times a power of two), so the dequantised model is exactly
// the model the release describes.
//
// Names: HF `model.layers.{i}.self_attn.q_a_proj.weight` is release `layers.{i}.attn.wq_a.weight`;
// the routed experts, one HF tensor per layer ([E, 2I, D] gate_up, [E, D, I] down), are E release
// tensors each (`layers.{i}.ffn.experts.{e}.w1/w3/w2.weight`). Release keys `mtp.*` (the
// multi-token-prediction module) are not part of the forward pass and are ignored.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

// How the release stores one HF parameter.
enum class ReleaseFormat : std::uint8_t {
  plain,  // BF16, F32 or I64, no scale
  fp8,    // F8_E4M3 codes with 128 x 128 block scales
  fp4,    // routed experts: E2M1 codes packed two to a byte with per-32 scales, one tensor per expert
};

struct ReleaseName {
  ReleaseFormat format = ReleaseFormat::plain;
  // plain, fp8: the release tensor ("layers.3.attn.wq_a.weight").
  // fp4: the expert prefix ("layers.3.ffn.experts."), followed by "{e}.{part}.weight".
  std::string name;
  // fp4: the release parts stacked along the HF tensor's rows: {"w1", "w3"} (gate_up_proj) or
  // {"w2"} (down_proj).
  std::vector<std::string> parts;
};

// The release name and format of an HF parameter name (as expected_weights gives them);
// nullopt for a name the release does not have.
std::optional<ReleaseName> release_name(const std::string& hf_name);
// The HF name of a release tensor name (model-spec §2.7), nullopt for names outside the model
// (`mtp.*`, scales, unknown). Routed expert tensors map to their stacked HF tensor.
std::optional<std::string> hf_name(const std::string& release_name);

// The scale tensor's name: "X.weight" -> "X.scale".
std::string scale_name(const std::string& weight_name);

// Exact values of the storage codes.
double e8m0_value(std::uint8_t e);     // 2^(e - 127); NaN for 0xFF
double e2m1_value(std::uint8_t code);  // the low 4 bits
// Round to the nearest code, ties to the even code (the writer's quantiser); beyond 6 it
// saturates at +-6, NaN gives code 0.
std::uint8_t e2m1_code(double x);

// Power-of-two scale exponents as the release chooses them: the smallest e8m0 exponent whose
// scale brings the block's largest magnitude within the format's largest finite value
// (448 for E4M3, 6 for E2M1); 127 (scale 1) for an all-zero block.
std::uint8_t e8m0_exponent_for(double amax, double format_max);

// Every scale of a scale tensor (u8 E8M0 bytes or f32, 2-D) as a float64 multiplier;
// InputError naming `what` and the first scale that is not finite and positive.
std::vector<double> scale_values(const Tensor& scale, const std::string& what);

// Dequantisation to float64 [O, K]. `what` names the tensor in errors (InputError): a NaN
// code or scale, a scale tensor of the wrong shape or dtype, codes of the wrong shape.
// FP8 codes are f8_e4m3 [O, K]; its scale u8 (the E8M0 bytes) or f32 [ceil(O/128), ceil(K/128)].
Tensor dequantize_fp8(const Tensor& codes, const Tensor& scale, const std::string& what);
// FP4 codes are u8 [O, ceil(K/2)] (the I8 bytes); scale u8 (E8M0 bytes) [O, ceil(K/32)].
// Writes rows into `out` (float64, O * K values) so experts can be stacked without a copy;
// with c0/c1, only columns [c0, c1) of each row ([O, c1 - c0]; c0 even, on a code byte).
void dequantize_fp4(const Tensor& codes, const Tensor& scale, std::int64_t K, double* out, const std::string& what,
                    std::int64_t c0 = 0, std::int64_t c1 = -1);

}  // namespace tdiff
