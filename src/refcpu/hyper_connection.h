#pragma once
// Hyper-connections of the reference (model-spec §3.7, 4.7 step 47), float64. Per token,
// streams X [n_hc, D] (stream-major flat).
//   expand:   X[s] = e for every stream s
//   mix:      u = X/RMS(X) over n_hc·D;  mix = fn · u                     -> [M]
//   sinkhorn: pre[s] = σ(mix[s]·scale0 + base[s]) + ε_hc
//             post[s] = 2σ(mix[n+s]·scale1 + base[n+s])
//             comb = Sinkhorn(softmax_k(mix[2n + a·n + k]·scale2 + base[..]) + ε_hc)
//   pre:      x = Σ_s pre[s]·X[s]
//   post:     X'[k] = post[k]·y + Σ_a comb[a,k]·X[a]
//   head:     preh[s] = σ(hc_fn·u · scale0 + base[s]) + ε_hc; y = Σ_s preh[s]·X[s]
#include <cstdint>

namespace tdiff::refcpu {

// mix [N, M] from X [N, n_hc·D] and fn [M, n_hc·D].
void hc_mix(const double* X, std::int64_t tokens, std::int64_t flat, const double* fn, std::int64_t M, double eps,
            double* mix);
void hc_sinkhorn(const double* mix, std::int64_t tokens, std::int64_t n_hc, const double* base, const double* scale,
                 double hc_eps, std::int64_t iters, double* pre, double* post, double* comb);
// x [N, D] = Σ_s w[s]·X[s]
void hc_collapse(const double* X, const double* w, std::int64_t tokens, std::int64_t n_hc, std::int64_t D, double* x);
void hc_post(const double* X, const double* y, const double* post, const double* comb, std::int64_t tokens,
             std::int64_t n_hc, std::int64_t D, double* out);
// preh [N, n_hc] from the head's fn [n_hc, n_hc·D], base [n_hc], scale [1].
void hc_head_weights(const double* X, std::int64_t tokens, std::int64_t n_hc, std::int64_t D, const double* fn,
                     const double* base, const double* scale, double eps, double hc_eps, double* preh);

}  // namespace tdiff::refcpu
