// Gated pooling (hip/compressor.h): emu::gated_pool, one thread per (row, window, channel).
// The slot values are recomputed in each of the three passes (max, sum, weighted sum) rather
// than kept: the recomputation is bit-identical and needs no per-thread array of 2μ slots.
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/compressor.h"

#include <cmath>

#include "emu/compressor.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

struct PoolArgs {
  const float* P;
  const float* Z;
  const std::int64_t* start;
  const std::int64_t* length;
  const float* pb;
  float* out;
  std::int64_t B, S, rate, width, n;  // n = ⌊S/μ⌋ windows per row
  bool overlap;
  Fmt sm, st;
};

__global__ void gated_pool_kernel(PoolArgs a) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.B * a.n * a.width) return;
  const std::int64_t ch = g % a.width, w = (g / a.width) % a.n, b = g / (a.width * a.n);
  float* out = a.out + g;
  if (w >= a.length[b] / a.rate) {  // beyond the row's pooled windows
    *out = 0.0f;
    return;
  }
  const std::int64_t stride = (a.overlap ? 2 : 1) * a.width, mu = a.rate;
  const std::int64_t off = (b * a.S + a.start[b]) * stride;
  const float* P = a.P + off;
  const float* Z = a.Z + off;
  // Slot s: the A half of window w−1 (overlap, w > 0), then the B half (or the only half) of w.
  const std::int64_t first = (a.overlap && w > 0) ? 0 : mu, slots_end = 2 * mu;
  auto where = [&](std::int64_t s, std::int64_t& t, std::int64_t& j, std::int64_t& col) {
    if (s < mu) {
      j = s, t = (w - 1) * mu + j, col = ch;
    } else {
      j = s - mu, t = w * mu + j, col = (a.overlap ? a.width : 0) + ch;
    }
  };
  auto logit = [&](std::int64_t s) {
    std::int64_t t, j, col;
    where(s, t, j, col);
    return arith::add_fmt(Z[t * stride + col], a.pb[j * stride + col], a.sm);
  };
  float mx = -INFINITY;
  for (std::int64_t s = first; s < slots_end; ++s) {
    const float v = logit(s);
    mx = (mx < v) ? v : mx;  // std::max(mx, v)
  }
  auto weight = [&](std::int64_t s) { return arith::round_fmt(arith::exp_f32(arith::add_fmt(logit(s), -mx, a.sm)), a.sm); };
  float z = 0.0f;
  for (std::int64_t s = first; s < slots_end; ++s) z = arith::add_fmt(z, weight(s), a.sm);
  float acc = 0.0f;
  for (std::int64_t s = first; s < slots_end; ++s) {
    std::int64_t t, j, col;
    where(s, t, j, col);
    const float p = arith::round_fmt(arith::round_fmt(arith::div_rn(weight(s), z), a.sm), a.st);
    acc = arith::add_rn(acc, arith::mul_rn(p, P[t * stride + col]));
  }
  *out = arith::round_fmt(acc, a.st);
}

}  // namespace

void gated_pool(const float* d_P, const float* d_Z, std::int64_t B, std::int64_t S, const std::int64_t* d_start,
                const std::int64_t* d_length, const float* d_pb, std::int64_t rate, std::int64_t width, bool overlap,
                const emu::PoolSpec& spec, float* d_out, hipStream_t stream) {
  const std::int64_t n = S / rate, items = B * n * width;
  if (items == 0) return;
  const PoolArgs a{d_P, d_Z, d_start, d_length, d_pb, d_out, B, S, rate, width, n, overlap, spec.softmax, spec.st};
  constexpr int kThreads = 256;
  gated_pool_kernel<<<blocks_for(items, kThreads), kThreads, 0, stream>>>(a);
  check_kernel("gated_pool");
}

}  // namespace tdiff::hip
