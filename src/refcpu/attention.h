#pragma once
// Attention of the reference (model-spec §3.6, 4.1 step 4, 4.5), float64.
//   window mask: M[i, j] = (i − W < j ≤ i) ∧ mask[j]          (token indices)
//   core, per head h, for one batch row:
//     ℓ[i,k] = (q_h[i] · K[k]) · d^(−1/2) for visible keys k of [kv ; C]
//     o_h[i] = Σ_k exp(ℓ[i,k] − μ_i) / Z_i · K[k],   Z_i = Σ_k exp(ℓ[i,k] − μ_i) + exp(s_h − μ_i)
//   with μ_i the maximum over the visible logits and the sink s_h. No visible key: o = 0.
#include <cstdint>
#include <vector>

namespace tdiff::refcpu {

// The visible keys of query i in the order the core sums them (raw keys in their order, then
// compressed entries ascending), copied into `keys` [nk, d]; returns nk. S here is the key
// count (Sk below).
std::int64_t gather_keys(std::int64_t i, const double* kv, const std::uint8_t* win, const double* C,
                         const std::uint8_t* cmask, std::int64_t S, std::int64_t n, std::int64_t d,
                         std::vector<double>& keys);
// One query token q_i [H, d] over its visible keys [nk, d] (nk > 0): the scaled logits ℓ [H, nk],
// the probabilities p [H, nk] = exp(ℓ − μ) / Z, and (when sink_p is not null) the sink's share
// exp(s_h − μ) / Z per head [H]: the numbers attention_row sums, bit for bit.
void attention_probs(const double* q_i, const double* keys, std::int64_t nk, std::int64_t H, std::int64_t d,
                     const double* sinks, double* logits, double* probs, double* sink_p);

// One batch row. q [S, H, d], kv [Sk, d], win [S, Sk] (u8), C [n, d] and cmask [S, n] (u8,
// may be null when n = 0), sinks [H] -> o [S, H, d]. A prefill has Sk = S; a generation step
// has its S new queries and the cache's Sk keys.
void attention_row(const double* q, const double* kv, const std::uint8_t* win, const double* C,
                   const std::uint8_t* cmask, std::int64_t S, std::int64_t Sk, std::int64_t n, std::int64_t H,
                   std::int64_t d, const double* sinks, double* o);

}  // namespace tdiff::refcpu
