#pragma once
// Hyper-connection kernels (model-spec §3.7), emu/hyper_connection.h on the GPU. N tokens,
// n = hc_mult streams of width D, flat = n·D; X [N, n, D] in the stream format. Weights are
// float32 copies of the f64 tensors (static_cast<float>); the kernels round them as emu does.
//   hc_mix:      mix [N, M] = round_sk(Σ_c round_sk(X[t,c]·f_t) · round_sk(fn[q,c])), the sum in
//                float32 in emu's wavefront order (64 lane sums over c = k, k + 64, ..., then
//                a shuffle-down tree); f_t = the RMS factor (64-lane sums in norm_stats, then a
//                tree, as emu::rms_factor). Four tokens per workgroup share each fn read.
//   hc_sinkhorn: mix [N, (2+n)·n] -> pre [N, n], post [N, n], comb [N, n, n]: sigmoids,
//                softmax + ε_hc and `iters` Sinkhorn normalisations (columns first), every
//                operation rounded to the sinkhorn format; ε_hc flushed when !hc_eps.
//   hc_pre:      x [N, D] = round_out(Σ_s w[t,s]·X[t,s,:]) (float32 sum in stream order).
//   hc_post:     Xout[t,k,:] = round_out(post[t,k]·y[t,:] + Σ_a comb[t,a,k]·X[t,a,:]).
//   hc_head:     preh [N, n] = σ(mix·scale[0] + base) + ε_hc in the sinkhorn format (mix from
//                hc_mix with fn [n, flat]), y [N, D] = hc_pre(X, preh) in `out`.
// sinkhorn/head: base, scale float32 copies of the weights; eps = rms_norm_eps. spec: emu::hc_spec.
#include <cstdint>

#include "emu/arith.h"
#include "emu/hyper_connection.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void hc_mix(const float* d_X, std::int64_t tokens, std::int64_t flat, const float* d_fn, std::int64_t M, float eps,
            const emu::HcSpec& spec, float* d_mix, hipStream_t stream);
void hc_sinkhorn(const float* d_mix, std::int64_t tokens, std::int64_t n, const float* d_base, const float* d_scale,
                 float hc_eps, std::int64_t iters, const emu::HcSpec& spec, float* d_pre, float* d_post, float* d_comb,
                 hipStream_t stream);
void hc_pre(const float* d_X, const float* d_w, std::int64_t tokens, std::int64_t n, std::int64_t D, arith::Fmt out,
            float* d_x, hipStream_t stream);
void hc_post(const float* d_X, const float* d_y, const float* d_post, const float* d_comb, std::int64_t tokens,
             std::int64_t n, std::int64_t D, arith::Fmt out, float* d_Xout, hipStream_t stream);
// d_preh doubles as hc_mix's output before the sigmoid, so no scratch is needed.
void hc_head(const float* d_X, std::int64_t tokens, std::int64_t n, std::int64_t D, const float* d_fn,
             const float* d_base, const float* d_scale, float eps, float hc_eps, const emu::HcSpec& spec, arith::Fmt out,
             float* d_y, float* d_preh, hipStream_t stream);

}  // namespace tdiff::hip
