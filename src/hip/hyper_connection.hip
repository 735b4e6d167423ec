// Hyper-connection kernels (hip/hyper_connection.h), the arithmetic of emu/hyper_connection.cpp.
//   hc_mix:      one workgroup of 256 threads per 4 tokens: the RMS factor exactly as
//                emu::rms_factor (64 threads a token; lane k sums x[k], x[k + 64], ... then a
//                tree), then emu's wavefront order for every output: thread (lane k, group g)
//                keeps the float32 sums over c = k, k + 64, ... of its outputs for all 4
//                tokens in registers, and the 64 lane sums of each output meet in emu's
//                shuffle-down tree through LDS.
//   hc_sinkhorn: one thread per token (n ≤ kMaxHc; the whole map is n² ≤ 64 values).
//   hc_pre/post: one thread per output element, sums in stream order.
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/hyper_connection.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "emu/norm.h"
#include "emu/hyper_connection.h"
#include "emu/numerics.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

constexpr int kLanes = static_cast<int>(emu::kLanes);  // emu's RMS lanes (one CDNA wavefront)
constexpr int kMaxHc = 8;
// hc_mix: kMixTokens tokens per workgroup of kMixThreads. The RMS factor: kMixPer threads a
// token. The sums: thread (lane k = tid % kLanes, group g = tid / kLanes) owns outputs
// q0 + g·QPT + r (r < QPT) of a pass and adds, for each of the tokens, the terms c = k,
// k + kLanes, ... of each (x and fn read coalesced across the lanes, each fn value once per
// workgroup and group); then, token by token, the lane sums meet in emu's tree in LDS.
constexpr int kMixTokens = 4;
constexpr int kMixThreads = 256;
constexpr int kMixPer = kMixThreads / kMixTokens;
constexpr int kMixGroups = kMixThreads / kLanes;  // output groups per pass
static_assert(kLanes % kMixPer == 0, "whole RMS lanes per thread");
static_assert(kMixThreads % kLanes == 0, "whole lane sets per workgroup");

// emu::rms_factor of x[0..flat) by the kMixPer threads `l` of one token: thread l sums lanes
// l, l + kMixPer, ... (lane k: x[k], x[k + 64], ... in order), then emu's shuffle-down tree
// over the token's row of `lane`.
__device__ float rms_factor_token(const float* x, std::int64_t flat, float eps, Fmt stats, float* lane, int l) {
  constexpr int kAhead = 8;  // loads issued before their FMAs: the chain waits on one load in 8
  for (int k = l; k < kLanes; k += kMixPer) {
    float a = 0.0f;
    std::int64_t i = k;
    for (; i + (kAhead - 1) * kLanes < flat; i += kAhead * kLanes) {
      float v[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) v[u] = x[i + u * kLanes];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) a = arith::fma_fmt(v[u], v[u], a, stats);
    }
    for (; i < flat; i += kLanes) a = arith::fma_fmt(x[i], x[i], a, stats);
    lane[k] = a;
  }
  __syncthreads();
  for (int width = kLanes / 2; width > 0; width /= 2) {  // shuffle-down tree, in emu's pairing
    for (int k = l; k < width; k += kMixPer) lane[k] = arith::add_fmt(lane[k], lane[k + width], stats);
    __syncthreads();
  }
  const float mean = arith::round_fmt(arith::div_rn(lane[0], static_cast<float>(flat)), stats);
  return arith::round_fmt(arith::div_rn(1.0f, arith::sqrt_rn(arith::add_fmt(mean, eps, stats))), stats);
}

template <int QPT>  // outputs per thread and pass
__global__ void __launch_bounds__(kMixThreads)
    hc_mix_kernel(const float* X, std::int64_t tokens, std::int64_t flat, const float* fn, std::int64_t M, float eps,
                  Fmt sk, Fmt stats, float* mix) {
  constexpr int kBlock = kMixGroups * QPT;  // outputs per pass
  __shared__ float rms_lane[kMixTokens * kLanes];
  __shared__ float factor[kMixTokens];
  __shared__ float part[kBlock * kLanes];
  const int tid = static_cast<int>(threadIdx.x);
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * kMixTokens;
  const int live = static_cast<int>(tokens - t0 < kMixTokens ? tokens - t0 : kMixTokens);
  {
    const int j = tid / kMixPer, l = tid % kMixPer;
    // Rows past the end compute token t0's factor again and are never written.
    const float f = rms_factor_token(X + (j < live ? t0 + j : t0) * flat, flat, eps, stats, rms_lane + j * kLanes, l);
    if (l == 0) factor[j] = f;
  }
  __syncthreads();
  const int k = tid % kLanes, g = tid / kLanes;
  const float* row[kMixTokens];
  float fac[kMixTokens];
#pragma unroll
  for (int j = 0; j < kMixTokens; ++j) row[j] = X + (j < live ? t0 + j : t0) * flat, fac[j] = factor[j];
  for (std::int64_t q0 = 0; q0 < M; q0 += kBlock) {
    float acc[kMixTokens][QPT];
#pragma unroll
    for (int j = 0; j < kMixTokens; ++j)
#pragma unroll
      for (int r = 0; r < QPT; ++r) acc[j][r] = 0.0f;
    const float* wrow[QPT];
#pragma unroll
    for (int r = 0; r < QPT; ++r) {
      const std::int64_t q = q0 + g * QPT + r;
      wrow[r] = q < M ? fn + q * flat : nullptr;
    }
    // Terms c = k, k + 64, ... in order; the loads of kAhead of them are issued first.
    constexpr int kAhead = 2;
    auto step = [&](const float (&w)[QPT], const float (&xv)[kMixTokens]) {
#pragma unroll
      for (int j = 0; j < kMixTokens; ++j) {
        const float u = arith::round_fmt(arith::mul_rn(xv[j], fac[j]), sk);
#pragma unroll
        for (int r = 0; r < QPT; ++r) acc[j][r] = arith::add_rn(acc[j][r], arith::mul_rn(u, w[r]));
      }
    };
    std::int64_t c = k;
    for (; c + (kAhead - 1) * kLanes < flat; c += kAhead * kLanes) {
      float w[kAhead][QPT], xv[kAhead][kMixTokens];
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
#pragma unroll
        for (int r = 0; r < QPT; ++r) w[a][r] = wrow[r] ? wrow[r][c + a * kLanes] : 0.0f;
#pragma unroll
        for (int j = 0; j < kMixTokens; ++j) xv[a][j] = row[j][c + a * kLanes];
      }
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
#pragma unroll
        for (int r = 0; r < QPT; ++r) w[a][r] = arith::round_fmt(w[a][r], sk);
        step(w[a], xv[a]);
      }
    }
    for (; c < flat; c += kLanes) {
      float w[QPT], xv[kMixTokens];
#pragma unroll
      for (int r = 0; r < QPT; ++r) w[r] = wrow[r] ? arith::round_fmt(wrow[r][c], sk) : 0.0f;
#pragma unroll
      for (int j = 0; j < kMixTokens; ++j) xv[j] = row[j][c];
      step(w, xv);
    }
#pragma unroll
    for (int j = 0; j < kMixTokens; ++j) {
      __syncthreads();  // the previous token's tree is read out
#pragma unroll
      for (int r = 0; r < QPT; ++r) part[(g * QPT + r) * kLanes + k] = acc[j][r];
      __syncthreads();
      for (int width = kLanes / 2; width > 0; width /= 2) {  // emu's shuffle-down tree per output
        for (int i = tid; i < kBlock * width; i += kMixThreads) {
          float* p = part + (i / width) * kLanes + i % width;
          *p = arith::add_rn(*p, p[width]);
        }
        __syncthreads();
      }
      if (j < live)
        for (int i = tid; i < kBlock; i += kMixThreads)
          if (q0 + i < M) mix[(t0 + j) * M + q0 + i] = arith::round_fmt(part[i * kLanes], sk);
    }
  }
}

__device__ float sigmoid_fmt(float x, Fmt f) {
  return arith::round_fmt(arith::div_rn(1.0f, arith::add_rn(1.0f, arith::exp_f32(-x))), f);
}

__global__ void hc_sinkhorn_kernel(const float* mix, std::int64_t tokens, int n, const float* base, const float* scale,
                                   float eps, std::int64_t iters, Fmt f, float* pre, float* post, float* comb) {
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const std::int64_t M = (2 + n) * n;
  const float* m = mix + t * M;
  auto sc = [&](int i) { return arith::round_fmt(scale[i], f); };
  auto bs = [&](std::int64_t i) { return arith::round_fmt(base[i], f); };
  for (int s = 0; s < n; ++s) {
    pre[t * n + s] = arith::add_fmt(sigmoid_fmt(arith::add_fmt(arith::mul_fmt(m[s], sc(0), f), bs(s), f), f), eps, f);
    post[t * n + s] =
        arith::mul_fmt(2.0f, sigmoid_fmt(arith::add_fmt(arith::mul_fmt(m[n + s], sc(1), f), bs(n + s), f), f), f);
  }
  float P[kMaxHc * kMaxHc];
  for (int a = 0; a < n; ++a) {
    float* row = P + a * n;
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
      row[k] = arith::add_fmt(arith::mul_fmt(m[2 * n + a * n + k], sc(2), f), bs(2 * n + a * n + k), f);
      mx = (mx < row[k]) ? row[k] : mx;
    }
    float z = 0.0f;
    for (int k = 0; k < n; ++k) {
      row[k] = arith::round_fmt(arith::exp_f32(row[k] - mx), f);
      z = arith::add_fmt(z, row[k], f);
    }
    for (int k = 0; k < n; ++k) row[k] = arith::add_fmt(arith::round_fmt(arith::div_rn(row[k], z), f), eps, f);
  }
  auto normalise = [&](bool columns) {
    for (int u = 0; u < n; ++u) {
      float s = 0.0f;
      for (int v = 0; v < n; ++v) s = arith::add_fmt(s, columns ? P[v * n + u] : P[u * n + v], f);
      const float den = arith::add_fmt(s, eps, f);
      for (int v = 0; v < n; ++v) {
        float& e = columns ? P[v * n + u] : P[u * n + v];
        e = arith::round_fmt(arith::div_rn(e, den), f);
      }
    }
  };
  normalise(true);
  for (std::int64_t it = 1; it < iters; ++it) {
    normalise(false);
    normalise(true);
  }
  for (int e = 0; e < n * n; ++e) comb[t * n * n + e] = P[e];
}

__global__ void hc_pre_kernel(const float* X, const float* w, std::int64_t tokens, std::int64_t n, std::int64_t D,
                              Fmt out, float* x) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= tokens * D) return;
  const std::int64_t t = g / D, c = g % D;
  float acc = 0.0f;
  for (std::int64_t s = 0; s < n; ++s) acc = arith::add_rn(acc, arith::mul_rn(w[t * n + s], X[(t * n + s) * D + c]));
  x[g] = arith::round_fmt(acc, out);
}

__global__ void hc_post_kernel(const float* X, const float* y, const float* post, const float* comb, std::int64_t tokens,
                               std::int64_t n, std::int64_t D, Fmt out, float* Xout) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= tokens * n * D) return;
  const std::int64_t c = g % D, k = (g / D) % n, t = g / (n * D);
  float acc = 0.0f;
  for (std::int64_t a = 0; a < n; ++a)
    acc = arith::add_rn(acc, arith::mul_rn(comb[(t * n + a) * n + k], X[(t * n + a) * D + c]));
  Xout[g] = arith::round_fmt(arith::add_rn(arith::mul_rn(post[t * n + k], y[t * D + c]), acc), out);
}

// preh = σ(mix·scale[0] + base[s]) + ε in the Sinkhorn format (emu: scale and base unrounded).
__global__ void hc_head_weights_kernel(float* preh, std::int64_t tokens, std::int64_t n, const float* base,
                                       const float* scale, float eps, Fmt f) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= tokens * n) return;
  const float z = arith::add_fmt(arith::mul_fmt(preh[g], scale[0], f), base[g % n], f);
  preh[g] = arith::add_fmt(sigmoid_fmt(z, f), eps, f);
}

constexpr int kThreads = 256;

}  // namespace

void hc_mix(const float* d_X, std::int64_t tokens, std::int64_t flat, const float* d_fn, std::int64_t M, float eps,
            const emu::HcSpec& spec, float* d_mix, hipStream_t stream) {
  if (tokens == 0 || M == 0) return;
  const Fmt sk = spec.sinkhorn, stats = spec.norm_stats;
  const auto blocks = blocks_for(tokens, kMixTokens);
  // The fewest outputs per thread that cover M in one pass (v4: M = 24 -> 6; hc_head: n = 4 -> 1).
  const std::int64_t per = (M + kMixGroups - 1) / kMixGroups;
  if (per <= 1) hc_mix_kernel<1><<<blocks, kMixThreads, 0, stream>>>(d_X, tokens, flat, d_fn, M, eps, sk, stats, d_mix);
  else if (per <= 2) hc_mix_kernel<2><<<blocks, kMixThreads, 0, stream>>>(d_X, tokens, flat, d_fn, M, eps, sk, stats, d_mix);
  else if (per <= 4) hc_mix_kernel<4><<<blocks, kMixThreads, 0, stream>>>(d_X, tokens, flat, d_fn, M, eps, sk, stats, d_mix);
  else if (per <= 6) hc_mix_kernel<6><<<blocks, kMixThreads, 0, stream>>>(d_X, tokens, flat, d_fn, M, eps, sk, stats, d_mix);
  else hc_mix_kernel<8><<<blocks, kMixThreads, 0, stream>>>(d_X, tokens, flat, d_fn, M, eps, sk, stats, d_mix);
  check_kernel("hc_mix");
}

void hc_sinkhorn(const float* d_mix, std::int64_t tokens, std::int64_t n, const float* d_base, const float* d_scale,
                 float hc_eps, std::int64_t iters, const emu::HcSpec& spec, float* d_pre, float* d_post, float* d_comb,
                 hipStream_t stream) {
  if (n > kMaxHc) throw std::invalid_argument("hip::hc_sinkhorn: hc_mult above 8");
  if (tokens == 0) return;
  const Fmt f = spec.sinkhorn;
  const float eps = spec.eps(hc_eps);
  hc_sinkhorn_kernel<<<blocks_for(tokens, kThreads), kThreads, 0, stream>>>(
      d_mix, tokens, static_cast<int>(n), d_base, d_scale, eps, iters, f, d_pre, d_post, d_comb);
  check_kernel("hc_sinkhorn");
}

void hc_pre(const float* d_X, const float* d_w, std::int64_t tokens, std::int64_t n, std::int64_t D, arith::Fmt out,
            float* d_x, hipStream_t stream) {
  if (tokens * D == 0) return;
  hc_pre_kernel<<<blocks_for(tokens * D, kThreads), kThreads, 0, stream>>>(d_X, d_w, tokens, n, D, out, d_x);
  check_kernel("hc_pre");
}

void hc_post(const float* d_X, const float* d_y, const float* d_post, const float* d_comb, std::int64_t tokens,
             std::int64_t n, std::int64_t D, arith::Fmt out, float* d_Xout, hipStream_t stream) {
  if (tokens * n * D == 0) return;
  hc_post_kernel<<<blocks_for(tokens * n * D, kThreads), kThreads, 0, stream>>>(d_X, d_y, d_post, d_comb, tokens, n, D,
                                                                               out, d_Xout);
  check_kernel("hc_post");
}

void hc_head(const float* d_X, std::int64_t tokens, std::int64_t n, std::int64_t D, const float* d_fn,
             const float* d_base, const float* d_scale, float eps, float hc_eps, const emu::HcSpec& spec, arith::Fmt out,
             float* d_y, float* d_preh, hipStream_t stream) {
  if (tokens == 0) return;
  hc_mix(d_X, tokens, n * D, d_fn, n, eps, spec, d_preh, stream);
  hc_head_weights_kernel<<<blocks_for(tokens * n, kThreads), kThreads, 0, stream>>>(
      d_preh, tokens, n, d_base, d_scale, spec.eps(hc_eps), spec.sinkhorn);
  check_kernel("hc_head");
  hc_pre(d_X, d_preh, tokens, n, D, out, d_y, stream);
}

}  // namespace tdiff::hip
