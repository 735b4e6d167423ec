#pragma once
// The emu model of the hyper-connection kernels: the mixing GEMV (streams normalised with
// the norm-statistics format, product in the Sinkhorn format with float32 accumulation in a
// wavefront's order: 64 lane sums over c = k, k + 64, ..., then a shuffle-down tree), the
// sigmoid maps and Sinkhorn iterations with every operation rounded to the Sinkhorn format,
// ε_hc present or flushed, and the collapse/expand sums in float32 stored in the storage
// format.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

// The hyper-connection knobs as the kernels take them (emu and hip): the maps and Sinkhorn in
// `sinkhorn`, the streams' RMS factor in `norm_stats`, ε_hc kept (rounded to `sinkhorn`) or
// flushed to zero.
struct HcSpec {
  Fmt sinkhorn, norm_stats;
  bool keep_eps;
  float eps(float hc_eps) const { return keep_eps ? arith::round_fmt(hc_eps, sinkhorn) : 0.0f; }
};
HcSpec hc_spec(const Numerics& num);

void hc_mix(const float* X, std::int64_t tokens, std::int64_t flat, const double* fn, std::int64_t M, float eps,
            const Numerics& num, float* mix);
void hc_sinkhorn(const float* mix, std::int64_t tokens, std::int64_t n, const double* base, const double* scale,
                 float hc_eps, std::int64_t iters, const Numerics& num, float* pre, float* post, float* comb);
void hc_collapse(const float* X, const float* w, std::int64_t tokens, std::int64_t n, std::int64_t D, Fmt out, float* x);
void hc_post(const float* X, const float* y, const float* post, const float* comb, std::int64_t tokens, std::int64_t n,
             std::int64_t D, Fmt out, float* Xout);
void hc_head_weights(const float* X, std::int64_t tokens, std::int64_t n, std::int64_t D, const double* fn,
                     const double* base, const double* scale, float eps, float hc_eps, const Numerics& num, float* preh);

}  // namespace tdiff::emu
