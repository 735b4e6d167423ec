// Flash-style attention core (hip/attention.h): the per-block arithmetic of
// emu::flash_attention_row. A workgroup serves one query of one row and G heads (one KV head:
// all heads read the same keys and the same mask, so each K tile staged in LDS serves G
// heads); G groups of kKvBlock threads, thread (g, j) of head g.
//   qk phase: thread j of a group owns key j of the block; K goes through LDS in channel
//             chunks, the dot accumulated sequentially over d in qk_accum (emu's order).
//   softmax:  every thread of a group derives the block max, alpha, l_blk and l from LDS
//             (the same sequential sums, so nothing needs broadcasting).
//   pv phase: thread j of a group owns channels j, j + kKvBlock, ... (kept in registers); the
//             sum over the block's keys is sequential per channel in pv_accum, the channels
//             interleaved for ILP; V rows are read coalesced (keys = values).
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/attention.h"

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "emu/attention.h"
#include "emu/numerics.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

constexpr int kBlk = static_cast<int>(emu::kKvBlock);  // keys per block = threads per head group
constexpr int kChunk = 64;                              // channels per LDS K tile
constexpr int kMaxGroups = 4;                           // heads per workgroup
constexpr int kMaxPerLane = 16;                         // channels per thread: d <= 1024

struct AttnArgs {
  const float* q;
  const float* kv;
  const std::uint8_t* win;
  const float* C;
  const std::uint8_t* cmask;
  const float* sinks;
  float* o;
  std::int64_t S, n, H, d;
  int groups;  // heads per workgroup
  Fmt st, qk, pv, stats;
  bool additive, per_block;
  float scale, bias;
};

// The storage, qk and pv formats of the inner loops: compile-time constants for the presets'
// combinations (round_fmt then folds to one rounding, or none), run-time values otherwise.
template <Fmt St, Fmt Qk, Fmt Pv>
struct FixedFormats {
  __device__ Fmt st() const { return St; }
  __device__ Fmt qk() const { return Qk; }
  __device__ Fmt pv() const { return Pv; }
};
struct RuntimeFormats {
  Fmt st_, qk_, pv_;
  __device__ Fmt st() const { return st_; }
  __device__ Fmt qk() const { return qk_; }
  __device__ Fmt pv() const { return pv_; }
};

// kPer: channels per thread in registers (d <= kBlk·kPer); fewer registers for small heads.
template <int kPer, class Formats>
__global__ void __launch_bounds__(kBlk* kMaxGroups) attention_kernel(AttnArgs a, Formats f) {
  extern __shared__ float smem[];
  const std::int64_t d = a.d, S = a.S, n = a.n, total = S + n;
  const int G = a.groups;
  float* q_s = smem;                      // [G][d]  the query rows, as MMA operands
  float* kt = q_s + G * d;                // [kBlk][kChunk + 1] K tile
  float* s_s = kt + kBlk * (kChunk + 1);  // [G][kBlk] logits
  float* p_s = s_s + G * kBlk;            // [G][kBlk] probabilities

  const int tid = static_cast<int>(threadIdx.x), g = tid / kBlk, lane = tid % kBlk;
  const std::int64_t head_groups = (a.H + G - 1) / G;
  const std::int64_t i = blockIdx.x / head_groups, h = (blockIdx.x % head_groups) * G + g, b = blockIdx.y;
  const bool head_ok = h < a.H;  // the last group may have idle heads; they still take every barrier
  const float* kv = a.kv + b * S * d;
  const float* C = a.C ? a.C + b * n * d : nullptr;
  const std::uint8_t* win = a.win + (b * S + i) * S;
  const std::uint8_t* cmask = a.cmask ? a.cmask + (b * S + i) * n : nullptr;
  auto key = [&](std::int64_t j) { return j < S ? kv + j * d : C + (j - S) * d; };

  float* qg = q_s + g * d;
  const float* q = a.q + ((b * S + i) * a.H + h) * d;
  for (std::int64_t c = lane; c < d; c += kBlk) qg[c] = head_ok ? arith::mfma_operand(q[c], f.st()) : 0.0f;
  float acc[kPer];
#pragma unroll
  for (int r = 0; r < kPer; ++r) acc[r] = 0.0f;
  float m = head_ok ? arith::round_fmt(a.sinks[h], a.stats) : 0.0f;
  float l = 1.0f;  // the sink's own exp(s − m) with m = s
  float* sg = s_s + g * kBlk;
  float* pg = p_s + g * kBlk;

  for (std::int64_t j0 = 0; j0 < total; j0 += kBlk) {
    const int jn = static_cast<int>(total - j0 < kBlk ? total - j0 : kBlk);
    const std::int64_t j = j0 + lane;
    const bool vis = lane < jn && (j < S ? win[j] != 0 : cmask[j - S] != 0);
    // neg_inf skips a block the query sees nothing of; additive reads every block.
    if (!__syncthreads_or(vis) && !a.additive) continue;
    const bool used = head_ok && lane < jn && (vis || a.additive);
    float dot = 0.0f;
    for (std::int64_t c0 = 0; c0 < d; c0 += kChunk) {
      const int cn = static_cast<int>(d - c0 < kChunk ? d - c0 : kChunk);
      __syncthreads();
      // blockDim is a multiple of kChunk: thread tid stages column tid % kChunk of rows
      // tid / kChunk, + G, + 2G, ... (coalesced along each key row).
      if (tid % kChunk < cn)
        for (int r = tid / kChunk; r < jn; r += static_cast<int>(blockDim.x) / kChunk)
          kt[r * (kChunk + 1) + tid % kChunk] = arith::mfma_operand(key(j0 + r)[c0 + tid % kChunk], f.st());
      __syncthreads();
      if (used)
        for (int cc = 0; cc < cn; ++cc) dot = arith::fma_fmt(qg[c0 + cc], kt[lane * (kChunk + 1) + cc], dot, f.qk());
    }
    if (lane < jn) {
      float sj = -INFINITY;  // where(mask, s, −∞): never used
      if (used) {
        sj = arith::round_fmt(arith::mul_rn(dot, a.scale), a.stats);
        if (!vis) sj = arith::add_fmt(sj, a.bias, a.stats);
      }
      sg[lane] = sj;
    }
    __syncthreads();
    float m_blk = -INFINITY;
    for (int t = 0; t < jn; ++t)
      if (sg[t] != -INFINITY) m_blk = (m_blk < sg[t]) ? sg[t] : m_blk;  // std::max(m_blk, s)
    const float m_new = (m < m_blk) ? m_blk : m;
    const float alpha = arith::round_fmt(arith::exp_f32(m - m_new), a.stats);
    if (lane < jn) {
      const float sj = sg[lane];
      pg[lane] = sj == -INFINITY ? 0.0f : arith::mfma_operand(arith::exp_f32(sj - m_new), f.st());
    }
    __syncthreads();
    float l_blk = 0.0f;
    for (int t = 0; t < jn; ++t) l_blk = arith::add_fmt(l_blk, pg[t], a.stats);
    const float l_old = l;
    l = arith::add_fmt(arith::mul_fmt(l, alpha, a.stats), l_blk, a.stats);
    // Every key of the block, masked ones times p = 0, as the P·V MMA does.
    float blk[kPer];
#pragma unroll
    for (int r = 0; r < kPer; ++r) blk[r] = 0.0f;
    for (int t = 0; t < jn; ++t) {
      const float p = pg[t];
      const float* v = key(j0 + t);
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
        const std::int64_t c = lane + r * kBlk;
        if (c < d) blk[r] = arith::fma_fmt(p, arith::mfma_operand(v[c], f.st()), blk[r], f.pv());
      }
    }
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      if (!a.per_block)
        acc[r] = arith::add_fmt(arith::mul_fmt(acc[r], alpha, f.pv()), blk[r], f.pv());
      else  // FA1: normalised after every block, stored in the storage format
        acc[r] = arith::round_fmt(
            arith::div_rn(arith::add_rn(arith::mul_rn(arith::mul_rn(acc[r], l_old), alpha), blk[r]), l), f.st());
    }
    m = m_new;
  }
  if (!head_ok) return;
  float* o = a.o + ((b * S + i) * a.H + h) * d;
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const std::int64_t c = lane + r * kBlk;
    if (c < d) o[c] = a.per_block ? acc[r] : arith::round_fmt(arith::div_rn(acc[r], l), f.st());
  }
}

std::size_t lds_bytes(int groups, std::int64_t d) {
  return sizeof(float) * static_cast<std::size_t>(groups * d + kBlk * (kChunk + 1) + 2 * groups * kBlk);
}

}  // namespace

void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const Numerics& num, float* d_o, hipStream_t stream) {
  if (n > 0 && (!d_C || !d_cmask)) throw std::invalid_argument("hip::attention: n > 0 needs C and cmask");
  if (d > kBlk * kMaxPerLane) throw std::invalid_argument("hip::attention: head_dim above 1024");
  if (B == 0 || S == 0 || H == 0) return;
  // 48 KiB: the most NVIDIA gives without an opt-in, below gfx90a's 64 KiB.
  int groups = kMaxGroups;
  while (groups > 1 && (groups > H || lds_bytes(groups, d) > 48 * 1024)) groups /= 2;
  AttnArgs a{d_q, d_kv, d_win, n > 0 ? d_C : nullptr, n > 0 ? d_cmask : nullptr, d_sinks, d_o, S, n, H, d, groups,
             emu::fmt_of(num.storage), emu::fmt_of(num.qk_accum), emu::fmt_of(num.pv_accum),
             emu::fmt_of(num.softmax_stats), num.mask_style == MaskStyle::additive,
             num.rescale_order == RescaleOrder::per_block,
             1.0f / std::sqrt(static_cast<float>(d)),  // emu's scale, computed on the host as emu does
             arith::finfo_min(emu::fmt_of(num.storage))};
  const std::int64_t head_groups = (H + groups - 1) / groups;
  const dim3 grid(static_cast<unsigned>(S * head_groups), static_cast<unsigned>(B));
  const unsigned threads = static_cast<unsigned>(kBlk * groups);
  const std::size_t lds = lds_bytes(groups, d);
  auto run = [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    using arith::Fmt;
    if (a.st == Fmt::bf16 && a.qk == Fmt::f32 && a.pv == Fmt::f32)  // fixed
      attention_kernel<kPer><<<grid, threads, lds, stream>>>(a, FixedFormats<Fmt::bf16, Fmt::f32, Fmt::f32>{});
    else if (a.st == Fmt::f16 && a.qk == Fmt::f16 && a.pv == Fmt::f16)  // naive
      attention_kernel<kPer><<<grid, threads, lds, stream>>>(a, FixedFormats<Fmt::f16, Fmt::f16, Fmt::f16>{});
    else if (a.st == Fmt::f32 && a.qk == Fmt::f32 && a.pv == Fmt::f32)  // fp32
      attention_kernel<kPer><<<grid, threads, lds, stream>>>(a, FixedFormats<Fmt::f32, Fmt::f32, Fmt::f32>{});
    else
      attention_kernel<kPer><<<grid, threads, lds, stream>>>(a, RuntimeFormats{a.st, a.qk, a.pv});
  };
  if (d <= kBlk * 4)
    run(std::integral_constant<int, 4>{});
  else if (d <= kBlk * 8)
    run(std::integral_constant<int, 8>{});
  else
    run(std::integral_constant<int, kMaxPerLane>{});
  check_kernel("attention");
}

}  // namespace tdiff::hip
