// Flash-style attention core (hip/attention.h): the per-block arithmetic of
// emu::flash_attention_row, one workgroup of kKvBlock threads per (query, head, row).
//   qk phase: thread j owns key j of the block; K streamed through LDS in channel chunks,
//             the dot accumulated sequentially over d in qk_accum (emu's order).
//   softmax:  every thread derives the block max, alpha, l_blk and l from LDS (identical
//             sequential sums, so no broadcast is needed).
//   pv phase: thread t owns channels t, t + kKvBlock, ...; the sum over the block's keys is
//             sequential in pv_accum; V rows are read coalesced (keys = values, one KV head).
#include "hip/vendor.h"  // first: arith.h needs __host__ / __device__
#include "hip/attention.h"

#include <cmath>
#include <stdexcept>

#include "emu/attention.h"
#include "emu/numerics.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

constexpr int kBlk = static_cast<int>(emu::kKvBlock);  // keys per block = threads per workgroup
constexpr int kChunk = 64;                              // channels per LDS K tile

struct AttnArgs {
  const float* q;
  const float* kv;
  const std::uint8_t* win;
  const float* C;
  const std::uint8_t* cmask;
  const float* sinks;
  float* o;
  std::int64_t S, n, H, d;
  Fmt st, qk, pv, stats;
  bool additive, per_block;
  float scale, bias;
};

__global__ void __launch_bounds__(kBlk) attention_kernel(AttnArgs a) {
  extern __shared__ float smem[];
  const std::int64_t d = a.d, S = a.S, n = a.n, total = S + n;
  float* q_s = smem;                    // [d]   the query row, as an MMA operand
  float* acc = q_s + d;                 // [d]   output accumulator
  float* kt = acc + d;                  // [kBlk][kChunk + 1] K tile
  float* s_s = kt + kBlk * (kChunk + 1);  // [kBlk] logits
  float* p_s = s_s + kBlk;              // [kBlk] probabilities

  const int tid = static_cast<int>(threadIdx.x);
  const std::int64_t i = blockIdx.x / a.H, h = blockIdx.x % a.H, b = blockIdx.y;
  const float* kv = a.kv + b * S * d;
  const float* C = a.C ? a.C + b * n * d : nullptr;
  const std::uint8_t* win = a.win + (b * S + i) * S;
  const std::uint8_t* cmask = a.cmask ? a.cmask + (b * S + i) * n : nullptr;
  auto key = [&](std::int64_t j) { return j < S ? kv + j * d : C + (j - S) * d; };

  const float* q = a.q + ((b * S + i) * a.H + h) * d;
  for (std::int64_t c = tid; c < d; c += kBlk) {
    q_s[c] = arith::mfma_operand(q[c], a.st);
    acc[c] = 0.0f;
  }
  float m = arith::round_fmt(a.sinks[h], a.stats);
  float l = 1.0f;  // the sink's own exp(s − m) with m = s

  for (std::int64_t j0 = 0; j0 < total; j0 += kBlk) {
    const int jn = static_cast<int>(total - j0 < kBlk ? total - j0 : kBlk);
    const std::int64_t j = j0 + tid;
    const bool vis = tid < jn && (j < S ? win[j] != 0 : cmask[j - S] != 0);
    // neg_inf skips a block the query sees nothing of; additive reads every block.
    if (!__syncthreads_or(vis) && !a.additive) continue;
    const bool used = tid < jn && (vis || a.additive);
    float dot = 0.0f;
    for (std::int64_t c0 = 0; c0 < d; c0 += kChunk) {
      const int cn = static_cast<int>(d - c0 < kChunk ? d - c0 : kChunk);
      __syncthreads();
      for (int e = tid; e < jn * cn; e += kBlk) {
        const int r = e / cn, cc = e % cn;
        kt[r * (kChunk + 1) + cc] = arith::mfma_operand(key(j0 + r)[c0 + cc], a.st);
      }
      __syncthreads();
      if (used)
        for (int cc = 0; cc < cn; ++cc) dot = arith::fma_fmt(q_s[c0 + cc], kt[tid * (kChunk + 1) + cc], dot, a.qk);
    }
    if (tid < jn) {
      float sj = -INFINITY;  // where(mask, s, −∞): never used
      if (used) {
        sj = arith::round_fmt(arith::mul_rn(dot, a.scale), a.stats);
        if (!vis) sj = arith::add_fmt(sj, a.bias, a.stats);
      }
      s_s[tid] = sj;
    }
    __syncthreads();
    float m_blk = -INFINITY;
    for (int t = 0; t < jn; ++t)
      if (s_s[t] != -INFINITY) m_blk = (m_blk < s_s[t]) ? s_s[t] : m_blk;  // std::max(m_blk, s)
    const float m_new = (m < m_blk) ? m_blk : m;
    const float alpha = arith::round_fmt(arith::exp_f32(m - m_new), a.stats);
    if (tid < jn) {
      const float sj = s_s[tid];
      p_s[tid] = sj == -INFINITY ? 0.0f : arith::mfma_operand(arith::exp_f32(sj - m_new), a.st);
    }
    __syncthreads();
    float l_blk = 0.0f;
    for (int t = 0; t < jn; ++t) l_blk = arith::add_fmt(l_blk, p_s[t], a.stats);
    const float l_old = l;
    l = arith::add_fmt(arith::mul_fmt(l, alpha, a.stats), l_blk, a.stats);
    for (std::int64_t c = tid; c < d; c += kBlk) {
      // every key of the block, masked ones times p = 0, as the P·V MMA does
      float blk = 0.0f;
      for (int t = 0; t < jn; ++t)
        blk = arith::fma_fmt(p_s[t], arith::mfma_operand(key(j0 + t)[c], a.st), blk, a.pv);
      if (!a.per_block)
        acc[c] = arith::add_fmt(arith::mul_fmt(acc[c], alpha, a.pv), blk, a.pv);
      else  // FA1: normalised after every block, stored in the storage format
        acc[c] = arith::round_fmt(
            arith::div_rn(arith::add_rn(arith::mul_rn(arith::mul_rn(acc[c], l_old), alpha), blk), l), a.st);
    }
    m = m_new;
  }
  float* o = a.o + ((b * S + i) * a.H + h) * d;
  for (std::int64_t c = tid; c < d; c += kBlk)
    o[c] = a.per_block ? acc[c] : arith::round_fmt(arith::div_rn(acc[c], l), a.st);
}

}  // namespace

void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const Numerics& num, float* d_o, hipStream_t stream) {
  if (n > 0 && (!d_C || !d_cmask)) throw std::invalid_argument("hip::attention: n > 0 needs C and cmask");
  if (B == 0 || S == 0 || H == 0) return;
  AttnArgs a{d_q, d_kv, d_win, n > 0 ? d_C : nullptr, n > 0 ? d_cmask : nullptr, d_sinks, d_o, S, n, H, d,
             emu::fmt_of(num.storage), emu::fmt_of(num.qk_accum), emu::fmt_of(num.pv_accum),
             emu::fmt_of(num.softmax_stats), num.mask_style == MaskStyle::additive,
             num.rescale_order == RescaleOrder::per_block,
             1.0f / std::sqrt(static_cast<float>(d)),  // emu's scale, computed on the host as emu does
             arith::finfo_min(emu::fmt_of(num.storage))};
  const std::size_t lds = sizeof(float) * static_cast<std::size_t>(2 * d + kBlk * (kChunk + 1) + 2 * kBlk);
  // 48 KiB: the most NVIDIA gives without an opt-in, below gfx90a's 64 KiB; d <= 4000.
  if (lds > 48 * 1024) throw std::invalid_argument("hip::attention: head_dim too large for the LDS tiles");
  attention_kernel<<<dim3(static_cast<unsigned>(S * H), static_cast<unsigned>(B)), kBlk, lds, stream>>>(a);
  check_kernel("attention");
}

}  // namespace tdiff::hip
