// Flash-style attention core (hip/attention.h): the per-block arithmetic of
// emu::flash_attention_row, whose softmax update both kernels take from emu/online_softmax.h
// and whose knobs from emu::attention_spec. A workgroup of 256 threads serves one query of one row and up to
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
#include "emu/online_softmax.h"
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

// The workgroup's view of its query, heads and LDS, shared by the kernel's phases.
struct Workgroup {
  float *q_s, *tile, *s_s, *p_s, *alpha_s, *l_s, *l_old_s;
  const float *kv, *C;
  const std::uint8_t *win, *cmask;
  std::int64_t d, S, n, total, i, h0, b, H;
  int heads, per_slot, ldq, tid, lane, slot, chunks;

  __device__ Workgroup(const AttnArgs& a, float* smem) {
    d = a.d, S = a.S, n = a.n, total = S + n, H = a.H;
    heads = a.heads, per_slot = heads / kSlots, ldq = a.ldq;
    q_s = smem;
    tile = q_s + heads * ldq;
    s_s = tile + kBlk * kTileLd;
    p_s = s_s + kMaxHeads * kScoreLd;
    alpha_s = p_s + kBlk * kMaxHeads;
    l_s = alpha_s + kMaxHeads;
    l_old_s = l_s + kMaxHeads;
    tid = static_cast<int>(threadIdx.x), lane = tid % kBlk, slot = tid / kBlk;
    const std::int64_t head_groups = (H + heads - 1) / heads;
    i = blockIdx.x / head_groups, h0 = (blockIdx.x % head_groups) * heads, b = blockIdx.y;
    kv = a.kv + b * S * d;
    C = a.C ? a.C + b * n * d : nullptr;
    win = a.win + (b * S + i) * S;
    cmask = a.cmask ? a.cmask + (b * S + i) * n : nullptr;
    chunks = static_cast<int>((d + kChunk - 1) / kChunk);
  }
  __device__ const float* key(std::int64_t j) const { return j < S ? kv + j * d : C + (j - S) * d; }
  __device__ bool visible(std::int64_t j) const { return j < S ? win[j] != 0 : cmask[j - S] != 0; }
  __device__ bool head_ok(int hl) const { return h0 + hl < H; }  // idle head slots still take every barrier
  // P row position of head hl: the pv phase's thread slot hl / per_slot reads its heads as one
  // float4 at 4·slot.
  __device__ int p_pos(int hl) const { return (hl / per_slot) * kMaxPerSlot + hl % per_slot; }
  // Stages channels [c0, c0 + kChunk) of the block's keys (zeros past d, read by no dot).
  __device__ void stage(std::int64_t j0, int jn, std::int64_t c0, Fmt st) const {
    const std::int64_t c = c0 + lane;
    for (int r = slot; r < jn; r += kSlots) tile[r * kTileLd + lane] = c < d ? arith::mfma_operand(key(j0 + r)[c], st) : 0.0f;
  }
};

// qk: the dots of key `lane` with heads slot + 4u, sequential over the channels in qk_accum.
template <class Formats>
__device__ __forceinline__ void qk_dots(const Workgroup& w, const Formats& f, std::int64_t j0, int jn, bool key_used,
                                        float (&dot)[kMaxPerSlot]) {
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u) dot[u] = 0.0f;
  for (int r = 0; r < w.chunks; ++r) {
    const std::int64_t c0 = static_cast<std::int64_t>(r) * kChunk;
    const int cn = static_cast<int>(w.d - c0 < kChunk ? w.d - c0 : kChunk);
    __syncthreads();
    w.stage(j0, jn, c0, f.st());
    __syncthreads();
    if (!key_used) continue;
    const float* krow = w.tile + w.lane * kTileLd;
    int cc = 0;
    for (; cc + 4 <= cn; cc += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(krow + cc);
#pragma unroll
      for (int u = 0; u < kMaxPerSlot; ++u) {
        if (u >= w.per_slot) break;
        const float4 q4 = *reinterpret_cast<const float4*>(w.q_s + (w.slot + kSlots * u) * w.ldq + c0 + cc);
        dot[u] = arith::fma_fmt(q4.x, k4.x, dot[u], f.qk());
        dot[u] = arith::fma_fmt(q4.y, k4.y, dot[u], f.qk());
        dot[u] = arith::fma_fmt(q4.z, k4.z, dot[u], f.qk());
        dot[u] = arith::fma_fmt(q4.w, k4.w, dot[u], f.qk());
      }
    }
    for (; cc < cn; ++cc)
#pragma unroll
      for (int u = 0; u < kMaxPerSlot; ++u) {
        if (u >= w.per_slot) break;
        dot[u] = arith::fma_fmt(w.q_s[(w.slot + kSlots * u) * w.ldq + c0 + cc], krow[cc], dot[u], f.qk());
      }
  }
}

// The block's softmax update (online_softmax.h): logits, then thread h derives head h's block
// max, alpha, l_blk and l from LDS in emu's order, and every thread computes P for its own
// (head, key) pairs. On return alpha_s, l_old_s and l_s hold the block's per-head values.
__device__ __forceinline__ void softmax_block(const Workgroup& w, const AttnArgs& a, Fmt st, int jn, bool key_used,
                                              bool vis, const float (&dot)[kMaxPerSlot], float& m, float& l) {
  namespace osm = emu::online_softmax;
  float sj[kMaxPerSlot];
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u) {
    if (u >= w.per_slot) break;
    const int hl = w.slot + kSlots * u;
    sj[u] = -INFINITY;  // where(mask, s, −∞): never used
    if (key_used && w.head_ok(hl)) sj[u] = osm::logit(dot[u], a.scale, vis, a.bias, a.stats);
    if (w.lane < jn) w.s_s[hl * kScoreLd + w.lane] = sj[u];
  }
  __syncthreads();
  if (w.tid < w.heads) {
    const float* srow = w.s_s + w.tid * kScoreLd;
    float m_blk = -INFINITY;
    for (int t = 0; t < jn; ++t)
      if (srow[t] != -INFINITY) m_blk = osm::max_of(m_blk, srow[t]);
    const float m_new = osm::max_of(m, m_blk);
    w.alpha_s[w.tid] = osm::alpha(m, m_new, a.stats);
    w.s_s[w.tid * kScoreLd + kBlk] = m_new;  // the row's spare slot
    m = m_new;
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u) {
    if (u >= w.per_slot) break;
    const int hl = w.slot + kSlots * u;
    if (w.lane < jn) w.p_s[w.lane * kMaxHeads + w.p_pos(hl)] = osm::prob(sj[u], w.s_s[hl * kScoreLd + kBlk], st);
  }
  __syncthreads();
  if (w.tid < w.heads) {
    float l_blk = 0.0f;
    for (int t = 0; t < jn; ++t) l_blk = arith::add_fmt(l_blk, w.p_s[t * kMaxHeads + w.p_pos(w.tid)], a.stats);
    w.l_old_s[w.tid] = l;
    l = osm::running_sum(l, w.alpha_s[w.tid], l_blk, a.stats);
    w.l_s[w.tid] = l;
  }
}

// pv: thread (c, s) sums channel c of every chunk over the block's keys for its heads, masked
// keys times p = 0 as the P·V MMA does, and updates its running outputs; the chunk staged
// last for the qk phase is used first.
template <int kChunks, class Formats>
__device__ __forceinline__ void pv_block(const Workgroup& w, const AttnArgs& a, const Formats& f, std::int64_t j0, int jn,
                                         float (&acc)[kMaxPerSlot][kChunks]) {
#pragma unroll
  for (int r = kChunks - 1; r >= 0; --r) {
    if (r >= w.chunks) continue;
    const std::int64_t c = static_cast<std::int64_t>(r) * kChunk + w.lane;
    if (r != w.chunks - 1) {
      __syncthreads();
      w.stage(j0, jn, static_cast<std::int64_t>(r) * kChunk, f.st());
    }
    __syncthreads();
    float blk[kMaxPerSlot];
#pragma unroll
    for (int u = 0; u < kMaxPerSlot; ++u) blk[u] = 0.0f;
    for (int t = 0; t < jn; ++t) {
      const float v = w.tile[t * kTileLd + w.lane];
      const float4 p4 = *reinterpret_cast<const float4*>(w.p_s + t * kMaxHeads + w.slot * kMaxPerSlot);
      const float p[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int u = 0; u < kMaxPerSlot; ++u) {
        if (u >= w.per_slot) break;
        blk[u] = arith::fma_fmt(p[u], v, blk[u], f.pv());
      }
    }
    if (c >= w.d) continue;
#pragma unroll
    for (int u = 0; u < kMaxPerSlot; ++u) {
      if (u >= w.per_slot) break;
      const int hl = w.slot * w.per_slot + u;
      acc[u][r] = emu::online_softmax::update(acc[u][r], blk[u], w.alpha_s[hl], w.l_old_s[hl], w.l_s[hl], a.per_block,
                                              f.pv(), f.st());
    }
  }
}

// kChunks: 64-channel chunks per head row (d <= 64·kChunks), the PV registers per head.
template <int kChunks, class Formats>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttnArgs a, Formats f) {
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned rows
  const Workgroup w(a, reinterpret_cast<float*>(smem4));
  // The query rows as MMA operands; zeros pad each row to ldq and fill idle heads.
  const float* q = a.q + ((w.b * w.S + w.i) * a.H + w.h0) * w.d;
  for (int e = w.tid; e < w.heads * w.ldq; e += kThreads) {
    const int hl = e / w.ldq, c = e % w.ldq;
    w.q_s[e] = w.head_ok(hl) && c < w.d ? arith::mfma_operand(q[hl * w.d + c], f.st()) : 0.0f;
  }
  // Head state, held by thread h: running max and sum (the sink's own exp(s − m) = 1 at m = s).
  float m = w.tid < w.heads && w.head_ok(w.tid) ? arith::round_fmt(a.sinks[w.h0 + w.tid], a.stats) : 0.0f;
  float l = 1.0f;
  float acc[kMaxPerSlot][kChunks];
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u)
#pragma unroll
    for (int r = 0; r < kChunks; ++r) acc[u][r] = 0.0f;

  for (std::int64_t j0 = 0; j0 < w.total; j0 += kBlk) {
    const int jn = static_cast<int>(w.total - j0 < kBlk ? w.total - j0 : kBlk);
    const bool vis = w.lane < jn && w.visible(j0 + w.lane);
    // neg_inf skips a block the query sees nothing of; additive reads every block.
    if (!__syncthreads_or(vis) && !a.additive) continue;
    const bool key_used = w.lane < jn && (vis || a.additive);
    float dot[kMaxPerSlot];
    qk_dots(w, f, j0, jn, key_used, dot);
    softmax_block(w, a, f.st(), jn, key_used, vis, dot, m, l);
    pv_block<kChunks>(w, a, f, j0, jn, acc);
  }
  __syncthreads();
  if (w.tid < w.heads) w.l_s[w.tid] = l;  // blocks may all have been skipped: l is the sink's
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kMaxPerSlot; ++u) {
    const int hl = w.slot * w.per_slot + u;
    if (u >= w.per_slot || !w.head_ok(hl)) break;
    float* o = a.o + ((w.b * w.S + w.i) * a.H + w.h0 + hl) * w.d;
#pragma unroll
    for (int r = 0; r < kChunks; ++r) {
      const std::int64_t c = static_cast<std::int64_t>(r) * kChunk + w.lane;
      if (r < w.chunks && c < w.d) o[c] = emu::online_softmax::output(acc[u][r], w.l_s[hl], a.per_block, f.st());
    }
  }
}

// ---- The matrix-core kernel (qk_accum and pv_accum f32, 16-bit storage) -----------------
// A workgroup serves one query of one row and 16 heads: the block's logits are the product
// Q [16 heads x d] · Kᵀ [d x 64 keys] and its P·V the product P [16 x 64] · V [64 x d], both
// on the matrix cores in 16-deep steps with float32 accumulators (emu sums each dot
// sequentially; here the hardware's order inside a step, fixed from run to run). Everything
// else is emu's per-block arithmetic: logits rounded in softmax_stats, the block max, alpha,
// P rounded as a 16-bit operand, l in emu's sequential order, and the per-block P·V result
// combined with the running output elementwise (deferred or per_block), as emu does.
//   K (= V) goes through LDS as 16-bit patterns in chunks of kDc channels (the whole head on
//   NVIDIA, so the P·V phase reuses what the logits phase staged; 128 on gfx90a's 64 KiB).
//   Logits: wavefront w owns keys 16(w % 4) .. +15 and the w / 4-th of each chunk's 16-deep
//   steps (two partial sums with 8 wavefronts, added in a fixed order).
//   P·V: wavefront w owns the 16-channel tiles w, w + W, w + 2W, ...; each block's tile
//   goes through a per-wavefront LDS scratch to its lanes' running outputs (registers).
constexpr int kMmaHeads = 16;
constexpr int kMmaWaves = kThreads / kWaveSize;
constexpr int kKeyTiles = kBlk / 16;                  // 4
constexpr int kParts = kMmaWaves / kKeyTiles;         // 2 on NVIDIA, 1 with 64-wide wavefronts
constexpr int kElems = 16 * 16 / kWaveSize;           // a tile's elements per lane
constexpr int kScoreLdMma = kBlk + 4;                 // float rows: a multiple of 4 (wmma store)
// Channels per staged K chunk: the whole head where the LDS a workgroup may use allows it.
constexpr int kDcMax = vendor::kMaxLdsBytes > 64 * 1024 ? 512 : 128;
static_assert(kParts >= 1 && kMmaWaves % kKeyTiles == 0, "whole key tiles per wavefront row");

struct MmaArgs {
  const float* q;
  const std::uint16_t* kv;  // 16-bit patterns
  const std::uint8_t* win;
  const std::uint16_t* C;
  const std::uint8_t* cmask;
  const float* sinks;
  float* o;
  std::int64_t S, n, H, d;
  int dp, dc;  // d padded to 16; channels per staged chunk (a multiple of 16)
  bool vec8;   // kv and C rows in whole 16-byte runs
  Fmt st, stats;
  bool additive, per_block;
  float scale, bias;
};

// LDS in bytes: q [16][dp + 8] and K [64][dc + 8] as 16-bit patterns, P [16][64 + 8] too;
// float logit partials [kParts][16][kScoreLdMma]; per-wavefront scratch tiles; per-head
// alpha, l, l_old, m_new. Rows of 16-bit patterns padded by 8 (16 bytes: the 8 rows a
// fragment load reads fall into different banks).
std::size_t mma_lds_bytes(int dp, int dc) {
  return static_cast<std::size_t>(kMmaHeads * (dp + 8) + kBlk * (dc + 8) + kMmaHeads * (kBlk + 8)) * 2 +
         static_cast<std::size_t>(kParts * kMmaHeads * kScoreLdMma + kMmaWaves * 256 + 4 * kMmaHeads) * 4;
}

// The workgroup's view of its query, heads and LDS, shared by the matrix-core kernel's phases.
struct MmaWorkgroup {
  std::uint16_t *q_s, *k_s, *p_s;
  float *s_s, *scratch, *alpha_s, *l_s, *l_old_s, *m_new_s;
  const std::uint16_t *kv, *C;
  const std::uint8_t *win, *cmask;
  std::int64_t d, S, n, total, i, h0, b;
  int ldq, ldk, ldp, lds, tid, wave, lane, heads, chunks;

  __device__ MmaWorkgroup(const MmaArgs& a, std::uint16_t* lds16) {
    ldq = a.dp + 8, ldk = a.dc + 8, ldp = kBlk + 8, lds = kScoreLdMma;
    q_s = lds16;
    k_s = q_s + kMmaHeads * ldq;
    p_s = k_s + kBlk * ldk;
    s_s = reinterpret_cast<float*>(p_s + kMmaHeads * ldp);  // [kParts][16][lds]
    scratch = s_s + kParts * kMmaHeads * lds;
    alpha_s = scratch + kMmaWaves * 256;
    l_s = alpha_s + kMmaHeads;
    l_old_s = l_s + kMmaHeads;
    m_new_s = l_old_s + kMmaHeads;
    d = a.d, S = a.S, n = a.n, total = S + n;
    tid = static_cast<int>(threadIdx.x), wave = tid / kWaveSize, lane = tid % kWaveSize;
    const std::int64_t head_groups = (a.H + kMmaHeads - 1) / kMmaHeads;
    i = blockIdx.x / head_groups, h0 = (blockIdx.x % head_groups) * kMmaHeads, b = blockIdx.y;
    heads = static_cast<int>(a.H - h0 < kMmaHeads ? a.H - h0 : kMmaHeads);
    kv = a.kv + b * S * d;
    C = a.C ? a.C + b * n * d : nullptr;
    win = a.win + (b * S + i) * S;
    cmask = a.cmask ? a.cmask + (b * S + i) * n : nullptr;
    chunks = (a.dp + a.dc - 1) / a.dc;
  }
  __device__ bool visible(std::int64_t j) const { return j < S ? win[j] != 0 : cmask[j - S] != 0; }
  // Channels [c0, c0 + dc) of the block's keys (zeros past d and past the last key).
  // 16-byte runs when every key row is whole runs of 8 (the host checks d % 8 == 0 and the
  // alignment of kv and C), else one pattern at a time.
  __device__ void stage(const MmaArgs& a, std::int64_t j0, int jn, int c0) const {
    if (a.vec8) {
      const int runs = a.dc / 8;
      for (int e = tid; e < kBlk * runs; e += kThreads) {
        const int r = e / runs, c = (e % runs) * 8;
        const std::int64_t j = j0 + r, ch = c0 + c;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < jn && ch < d) v = *reinterpret_cast<const uint4*>(j < S ? kv + j * d + ch : C + (j - S) * d + ch);
        *reinterpret_cast<uint4*>(k_s + r * ldk + c) = v;
      }
      return;
    }
    for (int e = tid; e < kBlk * a.dc; e += kThreads) {
      const int r = e / a.dc, c = e % a.dc;
      const std::int64_t j = j0 + r, ch = c0 + c;
      std::uint16_t v = 0;
      if (r < jn && ch < d) v = j < S ? kv[j * d + ch] : C[(j - S) * d + ch];
      k_s[r * ldk + c] = v;
    }
  }
};

// Logits: partial sums of wavefront (key tile kt, part pt) over every chunk, stored to LDS.
template <bool kBf16>
__device__ __forceinline__ void mma_logits(const MmaWorkgroup& w, const MmaArgs& a, std::int64_t j0, int jn) {
  const int kt = w.wave % kKeyTiles, pt = w.wave / kKeyTiles;
  mma::Acc sacc;
  mma::zero(sacc);
  for (int r = 0; r < w.chunks; ++r) {
    const int c0 = r * a.dc, cn = a.dp - c0 < a.dc ? a.dp - c0 : a.dc;
    __syncthreads();
    w.stage(a, j0, jn, c0);
    __syncthreads();
    const int steps = cn / 16;
    for (int step = pt; step < steps; step += kParts) {
      mma::ATile<kBf16> at;
      mma::BTile<kBf16> bt;
      mma::load_a<kBf16>(at, w.q_s + c0 + step * 16, w.ldq);
      mma::load_b<kBf16>(bt, w.k_s + kt * 16 * w.ldk + step * 16, w.ldk);
      mma::mma<kBf16>(sacc, at, bt);
    }
  }
  mma::store(sacc, w.s_s + pt * kMmaHeads * w.lds + kt * 16, w.lds);
}

// The block's softmax update (online_softmax.h): logits in softmax_stats (masked keys −∞, or
// + finfo.min when additive), thread h's block max, alpha, P as 16-bit operands (0 for masked
// keys, idle heads and past the last key; the float value kept in the logits' place for l),
// and l. On return alpha_s, l_old_s and l_s hold the block's per-head values.
template <bool kBf16>
__device__ __forceinline__ void mma_softmax(const MmaWorkgroup& w, const MmaArgs& a, std::int64_t j0, int jn, float& m,
                                            float& l) {
  namespace osm = emu::online_softmax;
  for (int e = w.tid; e < kMmaHeads * kBlk; e += kThreads) {
    const int hl = e / kBlk, t = e % kBlk;
    float dot = w.s_s[hl * w.lds + t];
#pragma unroll
    for (int p2 = 1; p2 < kParts; ++p2) dot = arith::add_rn(dot, w.s_s[p2 * kMmaHeads * w.lds + hl * w.lds + t]);
    const bool vis = t < jn && w.visible(j0 + t);
    float sj = -INFINITY;
    if (t < jn && hl < w.heads && (vis || a.additive)) sj = osm::logit(dot, a.scale, vis, a.bias, a.stats);
    w.s_s[hl * w.lds + t] = sj;
  }
  __syncthreads();
  if (w.tid < w.heads) {
    const float* srow = w.s_s + w.tid * w.lds;
    float m_blk = -INFINITY;
    for (int t = 0; t < jn; ++t)
      if (srow[t] != -INFINITY) m_blk = osm::max_of(m_blk, srow[t]);
    const float m_new = osm::max_of(m, m_blk);
    w.alpha_s[w.tid] = osm::alpha(m, m_new, a.stats);
    w.m_new_s[w.tid] = m_new;
    m = m_new;
  }
  __syncthreads();
  for (int e = w.tid; e < kMmaHeads * kBlk; e += kThreads) {
    const int hl = e / kBlk, t = e % kBlk;
    const float pj = osm::prob(w.s_s[hl * w.lds + t], w.m_new_s[hl], a.st);
    w.s_s[hl * w.lds + t] = pj;
    w.p_s[hl * w.ldp + t] = mma::bits16(pj, kBf16);
  }
  __syncthreads();
  if (w.tid < w.heads) {
    float l_blk = 0.0f;
    for (int t = 0; t < jn; ++t) l_blk = arith::add_fmt(l_blk, w.s_s[w.tid * w.lds + t], a.stats);
    w.l_old_s[w.tid] = l;
    l = osm::running_sum(l, w.alpha_s[w.tid], l_blk, a.stats);
    w.l_s[w.tid] = l;
  }
}

// P·V, chunk by chunk, the last (still staged) first: wavefront w's 16-channel tiles, each
// block's tile through the wavefront's LDS scratch into its lanes' running outputs.
template <bool kBf16, int kUT>
__device__ __forceinline__ void mma_pv(const MmaWorkgroup& w, const MmaArgs& a, std::int64_t j0, int jn,
                                       float (&acc)[kUT][kElems]) {
  for (int r = w.chunks - 1; r >= 0; --r) {
    const int c0 = r * a.dc, cn = a.dp - c0 < a.dc ? a.dp - c0 : a.dc;
    if (r != w.chunks - 1) {
      __syncthreads();
      w.stage(a, j0, jn, c0);
    }
    __syncthreads();
    float* tile = w.scratch + w.wave * 256;
#pragma unroll
    for (int u = 0; u < kUT; ++u) {
      const int T = w.wave + kMmaWaves * u;  // the wavefront's u-th 16-channel tile
      if (T * 16 < c0 || T * 16 >= c0 + cn) continue;
      mma::Acc blk;
      mma::zero(blk);
#pragma unroll
      for (int kk = 0; kk < kBlk; kk += 16) {
        mma::ATile<kBf16> at;
        mma::BTileKN<kBf16> bt;
        mma::load_a<kBf16>(at, w.p_s + kk, w.ldp);
        mma::load_b_kn<kBf16>(bt, w.k_s + kk * w.ldk + (T * 16 - c0), w.ldk);
        mma::mma<kBf16>(blk, at, bt);
      }
      mma::store(blk, tile, 16);
      TDIFF_WAVE_SYNC();
#pragma unroll
      for (int e = 0; e < kElems; ++e) {
        const int idx = w.lane + kWaveSize * e, hl = idx / 16;
        // pv_accum is float32 on this path
        acc[u][e] = emu::online_softmax::update(acc[u][e], tile[idx], w.alpha_s[hl], w.l_old_s[hl], w.l_s[hl], a.per_block,
                                                Fmt::f32, a.st);
      }
      TDIFF_WAVE_SYNC();
    }
  }
}

// kUT: 16-channel tiles per wavefront (the running output: kUT x kElems floats per lane).
template <bool kBf16, int kUT>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(MmaArgs a) {
  extern __shared__ __attribute__((aligned(128))) std::uint16_t lds16[];  // wmma: 32-byte aligned tiles
  const MmaWorkgroup w(a, lds16);
  // Query rows as 16-bit operands; zeros pad each row to dp and fill idle heads.
  const float* q = a.q + ((w.b * w.S + w.i) * a.H + w.h0) * w.d;
  for (int e = w.tid; e < kMmaHeads * w.ldq; e += kThreads) {
    const int hl = e / w.ldq, c = e % w.ldq;
    w.q_s[e] = hl < w.heads && c < w.d ? mma::bits16(arith::mfma_operand(q[hl * w.d + c], a.st), kBf16) : std::uint16_t{0};
  }
  float m = w.tid < w.heads ? arith::round_fmt(a.sinks[w.h0 + w.tid], a.stats) : 0.0f;
  float l = 1.0f;
  float acc[kUT][kElems];
#pragma unroll
  for (int u = 0; u < kUT; ++u)
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[u][e] = 0.0f;

  for (std::int64_t j0 = 0; j0 < w.total; j0 += kBlk) {
    const int jn = static_cast<int>(w.total - j0 < kBlk ? w.total - j0 : kBlk);
    const bool vis_t = w.tid < jn && w.visible(j0 + w.tid);
    if (!__syncthreads_or(vis_t) && !a.additive) continue;
    mma_logits<kBf16>(w, a, j0, jn);
    __syncthreads();
    mma_softmax<kBf16>(w, a, j0, jn, m, l);
    mma_pv<kBf16, kUT>(w, a, j0, jn, acc);
  }
  __syncthreads();
  if (w.tid < w.heads) w.l_s[w.tid] = l;  // blocks may all have been skipped: l is the sink's
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kUT; ++u) {
    const int T = w.wave + kMmaWaves * u;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int idx = w.lane + kWaveSize * e, hl = idx / 16;
      const std::int64_t c = T * 16 + idx % 16;
      if (hl < w.heads && c < w.d)
        a.o[((w.b * w.S + w.i) * a.H + w.h0 + hl) * w.d + c] = emu::online_softmax::output(acc[u][e], w.l_s[hl], a.per_block, a.st);
    }
  }
}

}  // namespace

bool attention_on_matrix_cores(const emu::AttentionSpec& spec, bool matrix_cores) {
  return matrix_cores && (spec.st == Fmt::bf16 || spec.st == Fmt::f16) && spec.qk == Fmt::f32 && spec.pv == Fmt::f32;
}

namespace {

void attention_mma(const float* d_q, const std::uint16_t* d_kv16, const std::uint8_t* d_win, const std::uint16_t* d_C16,
                   const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
                   std::int64_t d, const float* d_sinks, const emu::AttentionSpec& spec, float* d_o, hipStream_t stream) {
  const int dp = static_cast<int>((d + 15) / 16 * 16);
  // The whole head per staged chunk where LDS allows (the P·V phase then reuses it).
  constexpr std::size_t kLdsLimit = vendor::kMaxLdsBytes;
  int dc = dp < kDcMax ? dp : kDcMax;
  while (dc > 16 && mma_lds_bytes(dp, dc) > kLdsLimit) dc = (dc / 2 + 15) / 16 * 16;
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  MmaArgs a{d_q, d_kv16, d_win, n > 0 ? d_C16 : nullptr, n > 0 ? d_cmask : nullptr, d_sinks, d_o, S, n, H, d, dp, dc,
            d % 8 == 0 && aligned16(d_kv16) && (n == 0 || aligned16(d_C16)),
            spec.st, spec.stats, spec.additive, spec.per_block, spec.scale, spec.mask_bias};
  const std::int64_t head_groups = (H + kMmaHeads - 1) / kMmaHeads;
  const dim3 grid(static_cast<unsigned>(S * head_groups), static_cast<unsigned>(B));
  const std::size_t lds = mma_lds_bytes(dp, dc);
  const int tiles = dp / 16, per_wave = (tiles + kMmaWaves - 1) / kMmaWaves;
  auto launch = [&](auto kernel) {
    if (lds > 48 * 1024 &&
        hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(lds)) != hipSuccess)
      check_kernel("attention: LDS opt-in");
    kernel<<<grid, kThreads, lds, stream>>>(a);
  };
  auto run = [&](auto bf16) {
    constexpr bool kBf16 = decltype(bf16)::value;
    if (per_wave <= 1) launch(attention_mma_kernel<kBf16, 1>);
    else if (per_wave <= 4) launch(attention_mma_kernel<kBf16, 4>);
    else launch(attention_mma_kernel<kBf16, 16>);
  };
  if (a.st == Fmt::bf16) run(std::true_type{});
  else run(std::false_type{});
  check_kernel("attention (matrix cores)");
}

}  // namespace

void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const emu::AttentionSpec& spec, float* d_o, hipStream_t stream,
               const std::uint16_t* d_kv16, const std::uint16_t* d_C16) {
  if (n > 0 && (!d_C || !d_cmask)) throw std::invalid_argument("hip::attention: n > 0 needs C and cmask");
  if (d > kChunk * kMaxChunks) throw std::invalid_argument("hip::attention: head_dim above 1024");
  if (B == 0 || S == 0 || H == 0) return;
  if (d_kv16) {
    if (!attention_on_matrix_cores(spec, true) || (n > 0 && !d_C16))
      throw std::logic_error("hip::attention: 16-bit patterns given outside the matrix-core path");
    attention_mma(d_q, d_kv16, d_win, d_C16, d_cmask, B, S, n, H, d, d_sinks, spec, d_o, stream);
    return;
  }
  // Heads per workgroup: 16, or fewer for models with fewer heads, or to stay within 64 KiB
  // of LDS (gfx90a's limit, kept on every vendor; NVIDIA needs an opt-in above 48 KiB).
  const int ldq = static_cast<int>((d + 3) / 4 * 4);
  constexpr std::size_t kLdsLimit = 64 * 1024;
  int heads = kMaxHeads;
  while (heads > kSlots && (heads / 2 >= H || lds_floats(heads, ldq) * sizeof(float) > kLdsLimit)) heads /= 2;
  AttnArgs a{d_q, d_kv, d_win, n > 0 ? d_C : nullptr, n > 0 ? d_cmask : nullptr, d_sinks, d_o, S, n, H, d, heads, ldq,
             spec.st, spec.qk, spec.pv, spec.stats, spec.additive, spec.per_block, spec.scale, spec.mask_bias};
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
