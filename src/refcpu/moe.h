#pragma once
// Mixture of experts of the reference (model-spec §3.8, 4.6 steps 40-45), float64.
//   router:  logit = z · Wgᵀ;  score = sqrt(softplus(logit))  (softplus(x) = x above 20)
//   weights: wt[t,k] = score[t, idx[t,k]] / (Σ_k' score[t, idx[t,k']] + 1e−20) · ρ
//   FFN:     g = min(x·Wgᵀ, Λ), u = clamp(x·Wuᵀ, −Λ, Λ), y = (silu(g) ⊙ u) · Wdᵀ
//   routed:  Σ_k wt[t,k] · FFN_{idx[t,k]}(z[t]), summed in slot order k = 0..K−1
#include <cstdint>
#include <functional>

namespace tdiff::refcpu {

void router_scores(const double* logit, std::int64_t count, double* score);
void routing_weights(const double* score, const std::int64_t* idx, std::int64_t tokens, std::int64_t E,
                     std::int64_t K, double rho, double* wt);
// x [N, D]; Wg, Wu [I, D]; Wd [D, I] -> y [N, D].
void swiglu_ffn(const double* x, std::int64_t N, std::int64_t D, const double* Wg, const double* Wu,
                const double* Wd, std::int64_t I, double limit, double* y);
// Rows [r0, r1), columns [c0, c1) of expert e's gate_up [2I, D] (part 0) or down [D, I]
// (part 1) in float64, written to dst ([r1 - r0, c1 - c0]). Asked only for experts some token
// selects, one piece of one column tile (linear.h) at a time, a tile's pieces in column order,
// and from several threads at once: a layer's routed experts (51 GB as float64 at real
// widths) are never converted whole; each thread holds one piece.
using ExpertRows = std::function<void(std::int64_t e, int part, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                                      std::int64_t c1, double* dst)>;
// z [N, D], idx/wt [N, K] -> routed [N, D].
void routed_experts(const double* z, std::int64_t N, std::int64_t D, const std::int64_t* idx, const double* wt,
                    std::int64_t K, const ExpertRows& weights, std::int64_t E, std::int64_t I, double limit,
                    double* routed);

}  // namespace tdiff::refcpu
