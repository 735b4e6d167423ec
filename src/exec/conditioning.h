#pragma once
// How sensitive each stage is, at the reference's own values, to the error its inputs carry:
// the conditioning the tolerance model (diff/expected.h) multiplies an inherited error by.
// docs/design/tolerance-model.md § "Conditioning" gives the formulas.
//
// The first-order propagation of an input error δx through a stage y = f(x) is δy = J δx. A
// rounding-like error is relative to each element, δx_j = ε x_j ξ_j with ξ_j independent of
// rms 1, so each output element's error has variance
//
//   σ_i² = ε² Σ_j J_ij² x_j²
//
// over every element j of every float input. For a sum of terms much larger than their result
// (massive activations mixed to a small value), a softmax whose weight is split between keys
// of very different values (sharp heads, sinks), an RMSNorm over a row dominated by one channel
// or the Sinkhorn iterates, σ_i is far above ε |y_i|, which is what the tolerance model assumed
// (κ = 1). The stage is evaluated exactly as the reference evaluates it (its masks, sink, clip
// and iterations included) on K inputs perturbed by independent Gaussian ξ, in float64, and
//
//   a_i = rms over the probes of δy_i  /  (ε sqrt(m) (|y_i| + rms(y)))
//
// (m float inputs, each perturbed by ε: the model's E_in of sqrt(m) ε) is the amplification at
// element i against that assumption. Stored per row of the output's last axis (a head's
// channels, a token's hidden vector), as the largest a_i of the row and never below 1:
//
//   g_row = max(1, max over the row of a_i)       G = max(1, ‖δy‖_rms / (ε sqrt(m) ‖y‖))
//
// G amplifies the tensor's relative L2 error, g_row each element's (diff/expected.h).
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "casefile/case_file.h"

namespace tdiff {

inline constexpr int kConditioningProbes = 4;
// The relative size of each probe: small enough that second-order terms (ε κ²) stay below
// 1e-3 for amplifications up to 30, large enough that float64 rounding of δy (1e-16 / ε)
// stays below 1e-9.
inline constexpr double kConditioningEpsilon = 0x1p-20;

// Whether `s` gets a conditioning (a float output and a float input other than the case inputs).
bool has_conditioning(const Stage& s, const std::vector<const Tensor*>& inputs);

// For each output of `s` (in its order): the row gains and G of a float output, nullopt for
// integer and boolean outputs. `inputs` and `outputs` are the reference's (float64); the
// probes run the stage on `reference` `probes` more times. Deterministic: the ξ come from the
// stage's name, the probe and the input's position.
std::vector<std::optional<StoredConditioning>> probe_conditioning(const Stage& s, const std::vector<const Tensor*>& inputs,
                                                                  const std::vector<Tensor>& outputs, Backend& reference,
                                                                  RunContext& ctx, int probes = kConditioningProbes);

}  // namespace tdiff
