#pragma once
// Statistics of a case's float64 reference that say how "trained-like" its model is: the
// quantities where trained LLMs differ from randomly initialised ones and where low-precision
// kernels lose accuracy (docs/guide/synthetic-models.md, tdiff stats; sources there). Per
// layer, over the real (unpadded) tokens of every row; computed by compute_model_stats (below)
// from the stored stage inputs.
//
// Attention (stage Lxx.attn.core; per real query token i, head h, its visible keys k):
//   ℓ[i,h,k] = q_h[i]·K[k] / sqrt(d)                 the pre-softmax logit, scaled (model-spec §3.6)
//   max_logit = max |ℓ|
//   p[i,h,k] = exp(ℓ − μ)/Z,  p_sink[i,h] = exp(s_h − μ)/Z,  Z = Σ_k exp(ℓ − μ) + exp(s_h − μ)
//   entropy[i,h] = −Σ_k p ln p − p_sink ln p_sink    (nats; the sink counts as one outcome)
//   entropy_q = its p10 / p50 / p90 over (i, h)
//   sink_mass = mean of p_sink over (i, h); sink_heads = share of heads h whose mean p_sink over
//   the layer's query tokens is at least 0.5
//   first_mass = mean over (i, h) of the probability on the row's first real token (0 where the
//   window no longer shows it): the sink of models without learned sinks (Xiao et al. 2023)
// Residual stream (stage Lxx.hc_ffn.post, X [B, S, n_hc, D], the layer's output):
//   act_max = max |X|, act_median = median |X|, act_ratio = act_max / act_median
// Router (stage Lxx.moe.router; top-k layers only, hash layers choose by token id):
//   v[t,e] = score[t,e] + bias[e]  (what moe.select ranks), sorted descending per token
//   margin[t] = v(K) − v(K+1), the gap between the last chosen and the first unchosen expert
//   margin_q = its p10 / p50 / p90 over tokens
// Quantiles: linear interpolation between order statistics, q(p) = v[(n−1)p].
// Attention logits are not stored (only stage outputs are), so they are recomputed from the
// reference's stored inputs of every Lxx.attn.core (q, kv, masks, compressed entries) and the model's sinks with refcpu's own
// attention code (refcpu/attention.h), bit for bit the numbers the reference summed.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "casefile/session.h"

namespace tdiff {

struct Quantiles {
  double p10 = std::numeric_limits<double>::quiet_NaN();
  double p50 = std::numeric_limits<double>::quiet_NaN();
  double p90 = std::numeric_limits<double>::quiet_NaN();
};
// The quantiles of `v` (reordered); NaN for an empty vector.
Quantiles quantiles(std::vector<double>& v);

struct LayerStats {
  int layer = 0;
  std::string type;  // layer_type_name: sliding_attention, ...
  double max_logit = 0;
  Quantiles entropy;
  double sink_mass = 0, sink_heads = 0, first_mass = 0;
  double act_max = 0, act_median = 0, act_ratio = 0;
  bool routed = false;  // a top-k layer (margins defined)
  Quantiles margin;
};

struct ModelStats {
  std::string case_path;
  std::int64_t tokens = 0;  // real tokens of the case
  std::vector<LayerStats> layers;
};

// InputError naming the case and the stage/tensor when the reference lacks a tensor it needs
// (every layer's attn.core inputs, hc_ffn.post/X, moe.router/score).
ModelStats compute_model_stats(CaseSession& session);

}  // namespace tdiff
