// Flash-style attention core (hip/attention.h): the per-block arithmetic of
// emu::flash_attention_row. A workgroup of 256 threads serves one query of one row and up to
// 16 heads (one KV head: all heads read the same keys under the same mask, so every K/V tile
// staged in LDS serves them all, and each thread's operands are reused across its heads):
//   qk phase: thread (j, s) owns key j of the block for heads s, s + 4, s + 8, s + 12; K goes
//             through LDS in 64-channel chunks, read as float4 runs; each dot accumulated
//             sequentially over d in qk_accum (emu's order).
//   softmax:  thread h (h < heads) derives head h's block max, alpha, l_blk and l from LDS
//             with emu's sequential sums and publishes them; every thread computes P for its
//             own (head, key) pairs.
//   pv phase: thread (c, s) owns channel c of every 64-channel chunk for heads s·n to
//             s·n + n − 1, n = heads / 4 (kept in registers); V (= K) goes through LDS again,
//             last chunk first (it is still there from the qk phase); the sum over the block's
//             keys is sequential per channel in pv_accum.
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

constexpr int kBlk = static_cast<int>(emu::kKvBlock);  // keys per block
constexpr int kChunk = 64;                              // channels per LDS K/V tile
constexpr int kThreads = 256;                           // 4 x kBlk
constexpr int kSlots = kThreads / kBlk;                 // head slots per key (qk), channel slots (pv)
constexpr int kMaxHeads = 16;                           // heads per workgroup
constexpr int kMaxPerSlot = kMaxHeads / kSlots;         // heads per thread
constexpr int kMaxChunks = 16;                          // d <= 1024
constexpr int kTileLd = kChunk + 4;                     // K/V tile row stride: float4 rows, no bank conflicts
constexpr int kScoreLd = kBlk + 1;                      // logits row stride (head h's row read by thread h)
static_assert(kChunk == kBlk, "thread j stages channel j and owns key j");

struct AttnArgs {
  const float* q;
  const float* kv;
  const std::uint8_t* win;
  const float* C;
  const std::uint8_t* cmask;
  const float* sinks;
  float* o;
  std::int64_t S, n, H, d;
  int heads;  // per workgroup: 4, 8 or 16 (per_slot = heads / 4 per thread)
  int ldq;    // q row stride in LDS: d rounded up to a multiple of 4
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

// LDS layout in floats: q [heads][ldq], K/V tile [kBlk][kTileLd], logits [kMaxHeads][kScoreLd],
// P [kBlk][kMaxHeads], per-head alpha, l, l_old [kMaxHeads] each.
std::size_t lds_floats(int heads, int ldq) {
  return static_cast<std::size_t>(heads * ldq + kBlk * kTileLd + kMaxHeads * kScoreLd + kBlk * kMaxHeads +
                                  3 * kMaxHeads);
}

// kChunks: 64-channel chunks per head row (d <= 64·kChunks), the PV registers per head.
template <int kChunks, class Formats>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttnArgs a, Formats f) {
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned rows
  float* smem = reinterpret_cast<float*>(smem4);
  const std::int64_t d = a.d, S = a.S, n = a.n, total = S + n;
  const int heads = a.heads, per_slot = heads / kSlots, ldq = a.ldq;
  float* q_s = smem;
  float* tile = q_s + heads * ldq;
  float* s_s = tile + kBlk * kTileLd;
  float* p_s = s_s + kMaxHeads * kScoreLd;
  float* alpha_s = p_s + kBlk * kMaxHeads;
  float* l_s = alpha_s + kMaxHeads;
  float* l_old_s = l_s + kMaxHeads;

  const int tid = static_cast<int>(threadIdx.x), lane = tid % kBlk, slot = tid / kBlk;
  const std::int64_t head_groups = (a.H + heads - 1) / heads;
  const std::int64_t i = blockIdx.x / head_groups, h0 = (blockIdx.x % head_groups) * heads, b = blockIdx.y;
  const float* kv = a.kv + b * S * d;
  const float* C = a.C ? a.C + b * n * d : nullptr;
  const std::uint8_t* win = a.win + (b * S + i) * S;
  const std::uint8_t* cmask = a.cmask ? a.cmask + (b * S + i) * n : nullptr;
  auto key = [&](std::int64_t j) { return j < S ? kv + j * d : C + (j - S) * d; };
  auto head_ok = [&](int hl) { return h0 + hl < a.H; };  // idle head slots still take every barrier
  // P row position of head hl: the pv phase's thread slot hl / per_slot reads its heads as one
  // float4 at 4·slot.
  auto p_pos = [&](int hl) { return (hl / per_slot) * kMaxPerSlot + hl % per_slot; };

  // The query rows as MMA operands; zeros pad each row to ldq and fill idle heads.
  const float* q = a.q + ((b * S + i) * a.H + h0) * d;
  for (int e = tid; e < heads * ldq; e += kThreads) {
    const int hl = e / ldq, c = e % ldq;
    q_s[e] = head_ok(hl) && c < d ? arith::mfma_operand(q[hl * d + c], f.st()) : 0.0f;
  }
  // Head state, held by thread h: running max and sum (the sink's own exp(s − m) = 1 at m = s).
  float m = tid < heads && head_ok(tid) ? arith::round_fmt(a.sinks[h0 + tid], a.stats) : 0.0f;
  float l = 1.0f;
  float acc[kMaxPerSlot][kChunks];
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u)
#pragma unroll
    for (int r = 0; r < kChunks; ++r) acc[u][r] = 0.0f;
  const int chunks = static_cast<int>((d + kChunk - 1) / kChunk);
  // Stages channels [c0, c0 + kChunk) of the block's keys (zeros past d, read by no dot).
  auto stage = [&](std::int64_t j0, int jn, std::int64_t c0) {
    const std::int64_t c = c0 + lane;
    for (int r = slot; r < jn; r += kSlots)
      tile[r * kTileLd + lane] = c < d ? arith::mfma_operand(key(j0 + r)[c], f.st()) : 0.0f;
  };

  for (std::int64_t j0 = 0; j0 < total; j0 += kBlk) {
    const int jn = static_cast<int>(total - j0 < kBlk ? total - j0 : kBlk);
    const std::int64_t j = j0 + lane;
    const bool vis = lane < jn && (j < S ? win[j] != 0 : cmask[j - S] != 0);
    // neg_inf skips a block the query sees nothing of; additive reads every block.
    if (!__syncthreads_or(vis) && !a.additive) continue;
    const bool key_used = lane < jn && (vis || a.additive);
    // qk: dots of key `lane` with heads slot + 4u, sequential over the channels.
    float dot[kMaxPerSlot];
#pragma unroll
    for (int u = 0; u < kMaxPerSlot; ++u) dot[u] = 0.0f;
    for (int r = 0; r < chunks; ++r) {
      const std::int64_t c0 = static_cast<std::int64_t>(r) * kChunk;
      const int cn = static_cast<int>(d - c0 < kChunk ? d - c0 : kChunk);
      __syncthreads();
      stage(j0, jn, c0);
      __syncthreads();
      if (!key_used) continue;
      const float* krow = tile + lane * kTileLd;
      int cc = 0;
      for (; cc + 4 <= cn; cc += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(krow + cc);
#pragma unroll
        for (int u = 0; u < kMaxPerSlot; ++u) {
          if (u >= per_slot) break;
          const float4 q4 = *reinterpret_cast<const float4*>(q_s + (slot + kSlots * u) * ldq + c0 + cc);
          dot[u] = arith::fma_fmt(q4.x, k4.x, dot[u], f.qk());
          dot[u] = arith::fma_fmt(q4.y, k4.y, dot[u], f.qk());
          dot[u] = arith::fma_fmt(q4.z, k4.z, dot[u], f.qk());
          dot[u] = arith::fma_fmt(q4.w, k4.w, dot[u], f.qk());
        }
      }
      for (; cc < cn; ++cc)
#pragma unroll
        for (int u = 0; u < kMaxPerSlot; ++u) {
          if (u >= per_slot) break;
          dot[u] = arith::fma_fmt(q_s[(slot + kSlots * u) * ldq + c0 + cc], krow[cc], dot[u], f.qk());
        }
    }
    float sj[kMaxPerSlot];
#pragma unroll
    for (int u = 0; u < kMaxPerSlot; ++u) {
      if (u >= per_slot) break;
      const int hl = slot + kSlots * u;
      sj[u] = -INFINITY;  // where(mask, s, −∞): never used
      if (key_used && head_ok(hl)) {
        sj[u] = arith::round_fmt(arith::mul_rn(dot[u], a.scale), a.stats);
        if (!vis) sj[u] = arith::add_fmt(sj[u], a.bias, a.stats);
      }
      if (lane < jn) s_s[hl * kScoreLd + lane] = sj[u];
    }
    __syncthreads();
    // softmax statistics of head `tid`, in emu's order.
    if (tid < heads) {
      const float* srow = s_s + tid * kScoreLd;
      float m_blk = -INFINITY;
      for (int t = 0; t < jn; ++t)
        if (srow[t] != -INFINITY) m_blk = (m_blk < srow[t]) ? srow[t] : m_blk;  // std::max(m_blk, s)
      const float m_new = (m < m_blk) ? m_blk : m;
      alpha_s[tid] = arith::round_fmt(arith::exp_f32(m - m_new), a.stats);
      s_s[tid * kScoreLd + kBlk] = m_new;  // the row's spare slot
      m = m_new;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kMaxPerSlot; ++u) {
      if (u >= per_slot) break;
      const int hl = slot + kSlots * u;
      const float m_new = s_s[hl * kScoreLd + kBlk];
      if (lane < jn)
        p_s[lane * kMaxHeads + p_pos(hl)] =
            sj[u] == -INFINITY ? 0.0f : arith::mfma_operand(arith::exp_f32(sj[u] - m_new), f.st());
    }
    __syncthreads();
    if (tid < heads) {
      float l_blk = 0.0f;
      for (int t = 0; t < jn; ++t) l_blk = arith::add_fmt(l_blk, p_s[t * kMaxHeads + p_pos(tid)], a.stats);
      l_old_s[tid] = l;
      l = arith::add_fmt(arith::mul_fmt(l, alpha_s[tid], a.stats), l_blk, a.stats);
      l_s[tid] = l;
    }
    // pv: every key of the block, masked ones times p = 0, as the P·V MMA does; the chunk
    // staged last for the qk phase is used first.
#pragma unroll
    for (int r = kChunks - 1; r >= 0; --r) {
      if (r >= chunks) continue;
      const std::int64_t c = static_cast<std::int64_t>(r) * kChunk + lane;
      if (r != chunks - 1) {
        __syncthreads();
        stage(j0, jn, static_cast<std::int64_t>(r) * kChunk);
      }
      __syncthreads();
      float blk[kMaxPerSlot];
#pragma unroll
      for (int u = 0; u < kMaxPerSlot; ++u) blk[u] = 0.0f;
      for (int t = 0; t < jn; ++t) {
        const float v = tile[t * kTileLd + lane];
        const float4 p4 = *reinterpret_cast<const float4*>(p_s + t * kMaxHeads + slot * kMaxPerSlot);
        const float p[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int u = 0; u < kMaxPerSlot; ++u) {
          if (u >= per_slot) break;
          blk[u] = arith::fma_fmt(p[u], v, blk[u], f.pv());
        }
      }
      if (c >= d) continue;
#pragma unroll
      for (int u = 0; u < kMaxPerSlot; ++u) {
        if (u >= per_slot) break;
        const int hl = slot * per_slot + u;
        const float alpha = alpha_s[hl];
        if (!a.per_block)
          acc[u][r] = arith::add_fmt(arith::mul_fmt(acc[u][r], alpha, f.pv()), blk[u], f.pv());
        else  // FA1: normalised after every block, stored in the storage format
          acc[u][r] = arith::round_fmt(
              arith::div_rn(arith::add_rn(arith::mul_rn(arith::mul_rn(acc[u][r], l_old_s[hl]), alpha), blk[u]),
                            l_s[hl]),
              f.st());
      }
    }
  }
  __syncthreads();
  if (tid < heads) l_s[tid] = l;  // blocks may all have been skipped: l is the sink's
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u) {
    const int hl = slot * per_slot + u;
    if (u >= per_slot || !head_ok(hl)) break;
    float* o = a.o + ((b * S + i) * a.H + h0 + hl) * d;
#pragma unroll
    for (int r = 0; r < kChunks; ++r) {
      const std::int64_t c = static_cast<std::int64_t>(r) * kChunk + lane;
      if (r < chunks && c < d)
        o[c] = a.per_block ? acc[u][r] : arith::round_fmt(arith::div_rn(acc[u][r], l_s[hl]), f.st());
    }
  }
}

}  // namespace

void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const Numerics& num, float* d_o, hipStream_t stream) {
  if (n > 0 && (!d_C || !d_cmask)) throw std::invalid_argument("hip::attention: n > 0 needs C and cmask");
  if (d > kChunk * kMaxChunks) throw std::invalid_argument("hip::attention: head_dim above 1024");
  if (B == 0 || S == 0 || H == 0) return;
  // Heads per workgroup: 16, or fewer for models with fewer heads, or to stay within 64 KiB
  // of LDS (gfx90a's limit; NVIDIA needs an opt-in above 48 KiB).
  const int ldq = static_cast<int>((d + 3) / 4 * 4);
  constexpr std::size_t kLdsLimit = 64 * 1024;
  int heads = kMaxHeads;
  while (heads > kSlots && (heads / 2 >= H || lds_floats(heads, ldq) * sizeof(float) > kLdsLimit)) heads /= 2;
  AttnArgs a{d_q, d_kv, d_win, n > 0 ? d_C : nullptr, n > 0 ? d_cmask : nullptr, d_sinks, d_o, S, n, H, d, heads, ldq,
             emu::fmt_of(num.storage), emu::fmt_of(num.qk_accum), emu::fmt_of(num.pv_accum),
             emu::fmt_of(num.softmax_stats), num.mask_style == MaskStyle::additive,
             num.rescale_order == RescaleOrder::per_block,
             1.0f / std::sqrt(static_cast<float>(d)),  // emu's scale, computed on the host as emu does
             arith::finfo_min(emu::fmt_of(num.storage))};
  const std::int64_t head_groups = (H + heads - 1) / heads;
  const dim3 grid(static_cast<unsigned>(S * head_groups), static_cast<unsigned>(B));
  const std::size_t lds = lds_floats(heads, ldq) * sizeof(float);
  auto launch = [&](auto kernel, auto formats) {
    if (lds > 48 * 1024 &&
        hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(lds)) != hipSuccess)
      check_kernel("attention: LDS opt-in");
    kernel<<<grid, kThreads, lds, stream>>>(a, formats);
  };
  auto run = [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    using arith::Fmt;
    using Bf16Fixed = FixedFormats<Fmt::bf16, Fmt::f32, Fmt::f32>;
    using F16Naive = FixedFormats<Fmt::f16, Fmt::f16, Fmt::f16>;
    using F32 = FixedFormats<Fmt::f32, Fmt::f32, Fmt::f32>;
    if (a.st == Fmt::bf16 && a.qk == Fmt::f32 && a.pv == Fmt::f32)  // fixed
      launch(attention_kernel<kChunks, Bf16Fixed>, Bf16Fixed{});
    else if (a.st == Fmt::f16 && a.qk == Fmt::f16 && a.pv == Fmt::f16)  // naive
      launch(attention_kernel<kChunks, F16Naive>, F16Naive{});
    else if (a.st == Fmt::f32 && a.qk == Fmt::f32 && a.pv == Fmt::f32)  // fp32
      launch(attention_kernel<kChunks, F32>, F32{});
    else
      launch(attention_kernel<kChunks, RuntimeFormats>, RuntimeFormats{a.st, a.qk, a.pv});
  };
  if (d <= kChunk * 4)
    run(std::integral_constant<int, 4>{});
  else if (d <= kChunk * 8)
    run(std::integral_constant<int, 8>{});
  else
    run(std::integral_constant<int, kMaxChunks>{});
  check_kernel("attention");
}

}  // namespace tdiff::hip
