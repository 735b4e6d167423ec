#pragma once
// Statistics of one candidate tensor against its reference. Plain data: no verdicts here
// (thresholds.h decides PASS/WARN/FAIL from these numbers).
//
// Definitions (r = reference, c = candidate, d = c - r, all in float64, over the elements
// where both sides are finite; the non-finite ones are counted instead):
//   cosine  = <r,c> / (|r| |c|); both zero vectors -> 1, exactly one zero vector -> 0
//   max_abs = max |d|,  rmse = sqrt(mean d^2),  rel_l2 = |d| / |r| (|r| = 0: 0 if |d| = 0, else inf)
//   max_abs_scaled = max |d_i| / max(s, |r_i|), s = max(1, rms(r)) (max_abs_scale): the
//             absolute error on tensors of order 1 (the paper's regime, unchanged), else the
//             error relative to the tensor's scale, or to the element where it is larger.
//             bf16/fp16 round relative to the values a result is made of (one bf16 step at
//             |x| = 26 is 0.125), and a sum of large terms can land near zero (the
//             hyper-connection collapse of four streams), so neither |d| alone nor |d|/|r_i|
//             reads rounding noise as noise; this is what the max_abs rules judge by default
//   err_rel = max |d_i| / (|r_i| + rms(r)): each element's error against what a relative
//             tolerance explains there plus what the tensor's scale explains anywhere (the
//             atol + rtol·|r| of Composable Kernel's checks, with atol = rtol·rms(r)); the
//             tolerance rule (thresholds.h) reads it beside rel_l2. argmax_err_rel is its
//             element, ref_at_err / cand_at_err the two values there (a report's "where")
//   max_rel = max |d| / max(|r_i|, rel_floor): the floor keeps near-zero reference values
//             (whose relative error is pure noise) from dominating; default 1e-3, absolute
//   new_nonfinite = positions where c is NaN/Inf and r is not the same non-finite value:
//             the candidate produced a NaN/Inf the reference lacks (always FAIL)
// One pass over both tensors (a second one for max_abs_scaled where rms(r) > 1), parallel
// over fixed chunks whose partial results are combined in chunk order, so the numbers are
// bit-identical for any OpenMP thread count.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

struct MetricOptions {
  double rel_floor = 1e-3;    // denominator floor of max_rel (absolute)
  int worst_tokens = 8;       // logits: how many worst tokens (by KL) to keep for reports
  int top_k = 10;             // logits: k of the top-k overlap
};

struct TensorMetrics {
  std::int64_t count = 0;          // elements in the tensor
  std::int64_t compared = 0;       // elements where both sides are finite
  double cosine = 1.0;
  double max_abs = 0.0;
  std::int64_t argmax_abs = -1;    // flat index of the first element reaching max_abs
  double max_abs_scaled = 0.0;
  std::int64_t argmax_abs_scaled = -1;  // flat index of the first element reaching max_abs_scaled
  double ref_at_max_abs_scaled = 0.0;   // |r| there, so a verdict can say what was scaled by what
  double max_abs_scale = 1.0;           // s = max(1, ref_rms), the floor of that scale
  double err_rel = 0.0;                 // max |d_i| / (|r_i| + rms(r))
  std::int64_t argmax_err_rel = -1;     // its first element (flat index)
  double ref_at_err = 0.0, cand_at_err = 0.0;  // r and c there
  double rmse = 0.0;
  double rel_l2 = 0.0;
  // The typical error of an element relative to itself: sqrt(median (d_i / r_i)² / 0.455) over
  // the elements with r_i != 0 (a sample of at most 2^20 at a fixed stride), which is σ for
  // d_i = σ r_i ξ_i with Gaussian ξ; robust to near-zero r_i. Where a tensor's largest values
  // are exact (bf16-exact massive activations) and the rest rounded, rel_l2 sees only the
  // former; the tolerance model propagates the larger of the two (diff/expected.h).
  double rel_elem = 0.0;
  double max_rel = 0.0;
  double ref_rms = 0.0;            // scale of the reference, to read max_abs against
  double max_abs_ref = 0.0;
  std::int64_t n_diff = 0;         // elements that differ at all (0: bit-identical values)
  std::int64_t nan_ref = 0, inf_ref = 0, nan_cand = 0, inf_cand = 0;
  std::int64_t new_nonfinite = 0;  // NaN/Inf in the candidate that the reference lacks
  // The first of those (flat index, -1: none) and both values there: where a report points.
  std::int64_t first_new_nonfinite = -1;
  double ref_at_new_nonfinite = 0.0, cand_at_new_nonfinite = 0.0;
};

// Throws InputError when the shapes differ; any dtypes (converted to float64).
TensorMetrics tensor_metrics(const Tensor& ref, const Tensor& cand, const MetricOptions& opt = {});

// Per token (a row of the last dimension, logits [..., V]): top-1 agreement, top-k overlap
// and KL(softmax(ref) || softmax(cand)) in float64. Rows with a NaN/Inf on either side are
// counted in nonfinite_tokens and left out of the statistics.
struct TopEntry {
  std::int64_t id = 0;
  double prob = 0.0;
};
struct TokenDetail {
  std::int64_t token = 0;          // row index (flat over the leading dimensions)
  double kl = 0.0;
  std::vector<TopEntry> top_ref, top_cand;  // top-k of each side, most likely first
};
struct LogitsMetrics {
  std::int64_t tokens = 0, vocab = 0, nonfinite_tokens = 0;
  double top1_agree = 1.0;         // share of tokens whose argmax matches
  double topk_overlap_mean = 1.0;  // mean |topk(r) & topk(c)| / k
  double topk_overlap_min = 1.0;
  double kl_mean = 0.0, kl_p99 = 0.0, kl_max = 0.0;  // p99: nearest rank
  std::vector<TokenDetail> worst;  // highest KL first
};
LogitsMetrics logits_metrics(const Tensor& ref, const Tensor& cand, const MetricOptions& opt = {});

// Expert (or entry) selection tensors [..., K] of integer ids; the order inside a row is
// irrelevant. A token is "equal" when its id set matches the reference's; flips count the
// reference ids missing from the candidate row. Tie hook: with the reference's scores
// [..., E] (ids index the last dimension), a differing token whose swapped-out and
// swapped-in ids have exactly equal scores is a tie, not a mismatch (both choices are right).
// Explanation hook: with the candidate's own scores too (the values its top-k compared), a
// differing, untied token is "explained" when its choice is a top-k of those scores: every id
// it took (each once; the indexer's -1 padding aside) scores at least as high as every id it
// did not take. The top-k then did its job; the flip comes from upstream numerics, which
// their own stages are judged on. A top-k that compares in a coarser type or adds the wrong
// bias takes ids its own scores rank lower: unexplained. An exact tie in its own scores may
// go either way (a run-dependent tie order is the determinism gate's to catch).
struct RoutingMetrics {
  std::int64_t tokens = 0, k = 0;
  std::int64_t equal_tokens = 0;
  std::int64_t tie_tokens = 0;        // differing only between exactly tied scores
  std::int64_t explained_tokens = 0;  // differing, untied, right on the candidate's own scores
  std::int64_t flips = 0;             // flipped choices summed over tokens (ties included)
  double equal_share = 1.0;           // equal_tokens / tokens
  double mismatch_share = 0.0;        // (tokens - equal - tie) / tokens
  double unexplained_share = 0.0;     // (tokens - equal - tie - explained) / tokens
  // The first token (row of the flattened leading dimensions, -1: none) counted in
  // mismatch_share, and the first counted in unexplained_share: where a report points.
  std::int64_t first_mismatch = -1, first_unexplained = -1;
  // Set when later stages were given the reference's selections (selection replay): the
  // verdict then reads unexplained_share, since explained flips moved nothing downstream.
  bool replayed = false;
  // Set when the candidate followed its own selections and what they moved is judged on its
  // own path: against a reference that followed the same choices (exec/followed_reference.h)
  // or with the moved tokens' rows apart (diff/divergence.h). The verdict then reads
  // unexplained_share, as with replay: an explained flip moved nothing a verdict misjudges.
  bool own_path = false;
  // What the verdict reads: a flip that later stages follow changes the model's output
  // whatever caused it, so without replay every untied flip counts.
  // Margins (the conditioning of a selection): per differing, untied token with reference
  // scores, the gap the swap had to bridge, max(given up) - min(taken) on the reference's
  // scores, over |those two| + 2 rms(scores), the scale err_rel measures a score's error in;
  // and whether its own scores explain it. set_expected (expected.h) counts the flips whose
  // margin lies within the scores' expected element error: a near-tie that the formats'
  // error may flip, judged as a tie (within_margin_*).
  struct FlipMargin {
    double margin = 0.0;
    bool explained = false;
  };
  std::vector<FlipMargin> flip_margins;
  std::int64_t within_margin_tokens = 0;       // of the differing, untied tokens
  std::int64_t within_margin_unexplained = 0;  // of those, the ones their own scores do not explain
  double judged_share() const {
    const double n = tokens ? static_cast<double>(tokens) : 1.0;
    return replayed || own_path ? unexplained_share - static_cast<double>(within_margin_unexplained) / n
                    : mismatch_share - static_cast<double>(within_margin_tokens) / n;
  }
};
RoutingMetrics routing_metrics(const Tensor& ref, const Tensor& cand, const Tensor* ref_scores = nullptr,
                               const Tensor* cand_scores = nullptr);

}  // namespace tdiff
