// Lightning indexer (hip/indexer.h).
//   idx_score: a workgroup scores a tile of kTq tokens × kTe entries; per head, Q and K
//              chunks go through LDS and each thread keeps its (token, entry) dot sequential
//              over d_I, then adds the head's term in head order (emu's arithmetic).
//   idx_topk:  one workgroup per token: ranks by counting (hip/topk_rank.h), the picks marked
//              in LDS, then compacted in ascending index order with a workgroup scan.
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/indexer.h"

#include <cmath>
#include <stdexcept>

#include "emu/indexer.h"
#include "hip/kernel_common.h"
#include "hip/topk_rank.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

constexpr int kTq = 16, kTe = 16, kCk = 32;  // tile: tokens, entries, channels per chunk
static_assert(kTq == kTe, "one loop stages both tiles");

struct ScoreArgs {
  const float* QI;
  const float* KI;
  const float* w;
  const std::int64_t* pos;
  const std::int64_t* length;
  float* score;
  std::int64_t S, n, heads, dim, rate;
  Fmt st, f;
  float scale;
};

__global__ void __launch_bounds__(kTq* kTe) idx_score_kernel(ScoreArgs a) {
  __shared__ float q_t[kTq][kCk + 1];
  __shared__ float k_t[kTe][kCk + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTe, ty = static_cast<int>(threadIdx.x) / kTe;
  const std::int64_t b = blockIdx.z, i0 = static_cast<std::int64_t>(blockIdx.y) * kTq,
                     e0 = static_cast<std::int64_t>(blockIdx.x) * kTe;
  const std::int64_t i = i0 + ty, e = e0 + tx;
  const float* QI = a.QI + b * a.S * a.heads * a.dim;
  const float* KI = a.KI + b * a.n * a.dim;
  float acc = 0.0f;
  for (std::int64_t h = 0; h < a.heads; ++h) {
    float dot = 0.0f;
    for (std::int64_t c0 = 0; c0 < a.dim; c0 += kCk) {
      const int cn = static_cast<int>(a.dim - c0 < kCk ? a.dim - c0 : kCk);
      __syncthreads();
      for (int t = static_cast<int>(threadIdx.x); t < kTq * kCk; t += kTq * kTe) {
        const int r = t / kCk, cc = t % kCk;
        if (cc < cn) {
          q_t[r][cc] = i0 + r < a.S ? arith::round_fmt(QI[((i0 + r) * a.heads + h) * a.dim + c0 + cc], a.st) : 0.0f;
          k_t[r][cc] = e0 + r < a.n ? arith::round_fmt(KI[(e0 + r) * a.dim + c0 + cc], a.st) : 0.0f;
        }
      }
      __syncthreads();
      for (int cc = 0; cc < cn; ++cc) dot = arith::fma_fmt(q_t[ty][cc], k_t[tx][cc], dot, a.f);
    }
    if (i < a.S) {
      const float relu = dot < 0.0f ? 0.0f : dot;  // std::max(dot, 0.0f)
      const float wt = arith::round_fmt(a.w[(b * a.S + i) * a.heads + h], a.f);
      acc = arith::fma_fmt(arith::round_fmt(arith::mul_rn(relu, a.scale), a.f), wt, acc, a.f);
    }
  }
  if (i >= a.S || e >= a.n) return;
  const std::int64_t p = a.pos[b * a.S + i];
  const std::int64_t causal = p + 1 >= 0 ? (p + 1) / a.rate : 0, n_row = a.length[b] / a.rate;
  a.score[(b * a.S + i) * a.n + e] = (e >= causal || e >= n_row) ? -INFINITY : acc;
}

constexpr int kSelThreads = detail::kTopkThreads;

struct TopkArgs {
  const float* score;
  const std::int64_t* pos;
  const std::int64_t* length;
  std::int64_t* sel;
  std::int64_t S, n, k, rate;
  Fmt cmp;
  bool unstable;
  std::uint64_t seed;
};

__global__ void __launch_bounds__(kSelThreads) idx_topk_kernel(TopkArgs a) {
  __shared__ detail::TopkShared sh;
  __shared__ std::int64_t offset[kSelThreads + 1];
  extern __shared__ std::uint8_t picked[];  // [n]
  const std::int64_t t = blockIdx.x, b = t / a.S;
  const float* row = a.score + t * a.n;
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t i0 = 0; i0 < a.n; i0 += kSelThreads) {
    const std::int64_t i = i0 + tid;
    const bool valid = i < a.n;
    const std::int64_t rank = detail::topk_rank(row, nullptr, a.n, i, valid, a.cmp, a.unstable,
                                                a.seed ^ static_cast<std::uint64_t>(t), sh);
    if (valid) picked[i] = rank < a.k ? 1 : 0;
  }
  const std::int64_t p = a.pos[t];
  const std::int64_t causal_pos = p + 1 >= 0 ? (p + 1) / a.rate : 0, n_row = a.length[b] / a.rate;
  // Picks below the causal count (emu: min(causal, n_row)), ascending; thread tid owns [lo, hi).
  auto min = [](std::int64_t x, std::int64_t y) { return x < y ? x : y; };
  const std::int64_t seg = (a.n + kSelThreads - 1) / kSelThreads, lo = tid * seg, hi = min(min(lo + seg, a.n), min(causal_pos, n_row));
  __syncthreads();
  std::int64_t count = 0;
  for (std::int64_t i = lo; i < hi; ++i) count += picked[i];
  offset[tid + 1] = count;
  __syncthreads();
  if (tid == 0) {
    offset[0] = 0;
    for (int u = 1; u <= kSelThreads; ++u) offset[u] += offset[u - 1];
  }
  __syncthreads();
  std::int64_t* out = a.sel + t * a.k;
  std::int64_t m = offset[tid];
  for (std::int64_t i = lo; i < hi; ++i)
    if (picked[i]) out[m++] = i;
  for (std::int64_t u = offset[kSelThreads] + tid; u < a.k; u += kSelThreads) out[u] = -1;
}

}  // namespace

void idx_score(const float* d_QI, const float* d_KI, const float* d_w, const std::int64_t* d_pos,
               const std::int64_t* d_length, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t heads,
               std::int64_t dim, std::int64_t rate, const emu::IndexerSpec& spec, float* d_score, hipStream_t stream) {
  if (B == 0 || S == 0 || n == 0) return;
  const ScoreArgs a{d_QI, d_KI, d_w, d_pos, d_length, d_score, S, n, heads, dim, rate, spec.st, spec.score,
                    1.0f / std::sqrt(static_cast<float>(dim))};  // emu's scale, computed as emu does
  const dim3 grid(blocks_for(n, kTe), blocks_for(S, kTq), static_cast<unsigned>(B));
  idx_score_kernel<<<grid, kTq * kTe, 0, stream>>>(a);
  check_kernel("idx_score");
}

void idx_topk(const float* d_score, const std::int64_t* d_pos, const std::int64_t* d_length, std::int64_t B,
              std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, const TopkSpec& spec,
              std::int64_t* d_sel, hipStream_t stream) {
  if (k < 1 || k > n) throw std::invalid_argument("hip::idx_topk: k must be in [1, n]");
  // The pick flags live in LDS next to the 12 KiB rank tile: n up to 32768 entries.
  if (n > 32768) throw std::invalid_argument("hip::idx_topk: more than 32768 compressed entries");
  if (B * S == 0) return;
  const TopkArgs a{d_score, d_pos, d_length, d_sel, S, n, k, rate, spec.cmp, spec.ties == TieBreak::unstable, spec.seed};
  idx_topk_kernel<<<static_cast<unsigned>(B * S), kSelThreads, static_cast<std::size_t>(n), stream>>>(a);
  check_kernel("idx_topk");
}

}  // namespace tdiff::hip
