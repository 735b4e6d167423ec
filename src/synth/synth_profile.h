#pragma once
// The trained profile of tdiff synth (--profile trained): which weights it draws differently
// from the default profile, and why that gives the float64 reference the statistics of trained
// LLMs. Sources and the measured statistics:
// docs/guide/synthetic-models.md (tdiff synth, tdiff stats), bench/README.md.
//
// Attention logits (model-spec §3.6): l = q^.(g * k^)/sqrt(d), where q^ is the RMS-normalised head query
// (no weight) and k^ the RMS-normalised key with gain g = kv_norm.weight. So g alone sets the
// logit scale, as QK-norm gains do in trained models. With q^ and k^ independent, the logit spread
// of head h is  sigma_h^2 = f_h * G^2 + (1 - f_h) * 1,  f_h the share of the head's query energy
// in the channels with gain G.
//   - kv_norm.weight (and the compressor's, whose entries are keys of the same softmax): the
//     first d/4 channels ("sharp subspace", never the RoPE channels) times G = kTrainedKeyGain;
//   - q_b_proj rows of head h in that subspace times a_h = 2^k, k = -2..2 in turn over the heads
//     from a random start per layer (trained_head_gains): f_h runs from 0.02 to 0.84, sigma_h from about 1.5 (broad heads) to
//     7.3 (sharp heads), and the largest |l| of a layer, sigma_h sqrt(2 ln #logits), lands at
//     20-40: trained LLMs' logits of tens, below the 100 that QK-Clip caps Kimi K2's at.
//   - o_a_proj: keys are also the values (V4 shares them), so G scales the attention output by
//     sqrt(G^2/4 + 3/4); o_a's gain divides it out, and each layer still adds O(1) to the streams.
// Attention sinks (learned per head, model-spec §3.6): s_h ~ N(ln W + 4, 1), W the sliding window. A
// broad head's visible logits sum to about W e^(sigma^2/2), so its sink takes most of the mass; a
// sharp head's largest logit exceeds s_h and its sink takes little: a quarter to a half of the
// heads are sink heads (mean sink probability >= 0.5).
// Massive activations: synth_massive (synth.h) in the embedding, which the residual streams keep:
// V/16 ids, two channels, |x| in [500, 1000): the 10^2-10^3 peaks of MoE checkpoints, several
// hundred times the streams' median |x| (~1-2).
// Near-tied routers: the router gate at gain kTrainedRouterGain (logits std 0.15 instead of 1;
// trained routers keep their logits small, e.g. under ST-MoE's z-loss) and the routing bias at
// std 0.01: the gap between the k-th and (k+1)-th biased score is a few bf16 steps (2^-8 at
// scores near 0.8) at the median with 8-16 experts; with 256 the top scores lie ~5x closer and
// the median gap is below one step (measured: bench/README.md).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "synth/synth_options.h"

namespace tdiff {

inline constexpr double kTrainedKeyGain = 8.0;
inline constexpr double kTrainedRouterGain = 0.15;
inline constexpr double kTrainedBiasStd = 0.01;
inline constexpr double kTrainedMassiveLo = 500.0;  // |M_c| of synth_massive
inline constexpr double kTrainedMassiveHi = 1000.0;

// "default", "trained"; parse throws InputError naming the known profiles.
const std::vector<std::string>& synth_profile_names();
SynthProfile parse_synth_profile(const std::string& name);
const char* synth_profile_name(SynthProfile p);

// A normal draw: max(floor, mean + std z).
struct SynthDraw {
  double mean = 0.0;
  double std = 0.0;
  double floor = -1e300;
};
// The trained profile's draw of parameter `name` where it differs from the default's (nullopt:
// the default's draw).
std::optional<SynthDraw> trained_draw(const ModelConfig& c, const std::string& name, const std::vector<std::int64_t>& shape);
// The gain the trained profile puts on element i (row-major) of `name` after the draw; empty when
// it keeps the drawn values.
std::function<double(std::int64_t)> trained_scale(const ModelConfig& c, const std::string& name, std::uint64_t seed);
// a_h of every head for the attention q_b_proj `name` (a function of the seed and the name).
std::vector<double> trained_head_gains(const ModelConfig& c, const std::string& name, std::uint64_t seed);

}  // namespace tdiff
