// GEMM kernels (gemm.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/gemm.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "emu/release_codes.h"
#include "hip/device.h"
#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

constexpr int kKTile = 32;           // emu::kKBlock
constexpr int kThreads = 256;
constexpr std::int64_t kSplits = 4;  // emu::kSplits
constexpr std::int64_t kKStep = 8;   // emu::kKStep

struct Args {
  const float* x;
  const std::uint16_t* x16;  // the activations as 16-bit patterns (matrix-core path), or null
  const float* w;
  const std::uint16_t* w16;  // the weight as 16-bit patterns (matrix-core path), or null
  float* y;
  std::int64_t ldx, ldy, M, K, O;
  std::int64_t x_stride, w_stride, y_stride;
  const std::int32_t* rows;
  const std::int32_t* starts;
  std::int32_t a_div;
  std::int64_t per_split;  // atomic: K range of one split
  Fmt acc, out;
  QuantWeight q;              // a release weight as stored (matrix-core path), when q.codes
  std::int64_t q_group_rows;  // rows of one group's weight (w_stride / K)
  std::int64_t q_scale_ld;    // scales per row (fp4) or per 128-row block (fp8)
  bool q_vec4;                // four consecutive codes load as one word (K % 4 == 0, aligned)
};

// Four consecutive operands of one row from global memory (zeros outside the row or K).
__device__ inline float4 fetch4(const float* src, std::int64_t k, std::int64_t K, bool valid, bool vec4) {
  if (valid && vec4 && k + 3 < K) return *reinterpret_cast<const float4*>(src + k);
  float v[4];
  for (int j = 0; j < 4; ++j) v[j] = (valid && k + j < K) ? src[k + j] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// LDS column of row/column c in k-row kk of the vector-ALU kernel's tiles: runs of 4 XOR-ed
// with the 4-deep k group, so that the transposing stores of a wavefront (8 k groups x 4
// rows) fall into 32 different banks while every run of 4 stays one aligned float4.
__device__ inline int swizzle(int kk, int c) { return c ^ (((kk >> 2) & 7) << 2); }

// A BM x BN output tile per workgroup of 256 threads, TM x TN outputs per thread; x and w
// tiles of 32 k-steps staged through LDS (k-major, so a thread reads its TM / TN operands as
// float4 runs). Operands come from global memory four consecutive k at a time, the next
// block's into registers while this block's products run. kFma: fused multiply-adds, which
// emu computes where the operands are 16-bit (products exact in float, so an FMA gives the
// bits of a rounded product plus sum) and in an SGEMM (float32 operands and accumulator);
// otherwise (fp8's scaled operands, or float32 operands into a 16-bit accumulator) the
// product is rounded first. kAcc: the accumulator format, a template argument so that the
// rounding after every product (fp16/bf16 accumulators) compiles to its own code, with no
// format switch in the inner loop.
template <int BM, int BN, int TM, int TN, bool kFma, Fmt kAcc, bool kAtomic>
__global__ void __launch_bounds__(kThreads) gemm_kernel(Args a, bool vec4) {
  static_assert((BM / TM) * (BN / TN) == kThreads && TN % 4 == 0, "one output block per thread");
  static_assert(BM >= 32 && BN >= 32 && (TM % 4 == 0 || TM < 4), "the swizzle stays inside a tile row");
  __shared__ float xs[kKTile][BM] __attribute__((aligned(16)));
  __shared__ float ws[kKTile][BN] __attribute__((aligned(16)));
  __shared__ std::int64_t x_row[BM], y_row[BM];

  const std::int64_t g = kAtomic ? blockIdx.z / kSplits : blockIdx.z;
  const std::int64_t split = kAtomic ? blockIdx.z % kSplits : 0;
  std::int64_t rows = a.M, first = 0;
  if (a.rows) first = a.starts[g], rows = a.starts[g + 1] - first;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= rows) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;
  const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);

  for (int i = tid; i < BM; i += kThreads) {
    const std::int64_t r = row0 + i;
    if (r < rows) {
      if (a.rows) {
        const std::int64_t e = a.rows[first + r];
        x_row[i] = e / a.a_div, y_row[i] = e;
      } else {
        x_row[i] = r, y_row[i] = r;
      }
    } else {
      x_row[i] = -1, y_row[i] = -1;
    }
  }
  const float* x = a.x + g * a.x_stride;
  const float* w = a.w + g * a.w_stride;
  float* y = a.y + g * a.y_stride;

  std::int64_t k0 = 0, k1 = a.K;
  if (kAtomic) {
    k0 = std::min(a.K, split * a.per_split);
    k1 = std::min(a.K, k0 + a.per_split);
  }
  // A thread's rows and columns: runs of 4 spread over the tile (float4 reads, no LDS bank
  // conflicts between neighbouring threads), or TM consecutive rows when TM < 4.
  auto row_of = [&](int i) { return TM % 4 == 0 ? (i / 4) * (BM * 4 / TM) + ty * 4 + i % 4 : ty * TM + i; };
  auto col_of = [&](int j) { return (j / 4) * (BN * 4 / TN) + tx * 4 + j % 4; };
  // Staging: slot q of a thread is row (tid + q·256) / 8 of the tile and its k group
  // ((tid + q·256) % 8) · 4; a wavefront reads whole 128-byte row segments.
  constexpr int kGroups = kKTile / 4;
  constexpr int kXSlots = BM * kGroups / kThreads, kWSlots = BN * kGroups / kThreads;
  static_assert(BM * kGroups % kThreads == 0 && BN * kGroups % kThreads == 0, "whole slots");
  float4 xv4[kXSlots], wv4[kWSlots];
  __syncthreads();
  auto fetch = [&](std::int64_t b0) {
#pragma unroll
    for (int q = 0; q < kXSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      const std::int64_t xr = x_row[r];
      xv4[q] = fetch4(x + (xr >= 0 ? xr : 0) * a.ldx, b0 + kq, k1, xr >= 0, vec4);
    }
#pragma unroll
    for (int q = 0; q < kWSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      const std::int64_t o = col0 + r;
      wv4[q] = fetch4(w + (o < a.O ? o : 0) * a.K, b0 + kq, k1, o < a.O, vec4);
    }
  };
  float total[TM][TN] = {};
  if (k0 < k1) fetch(k0);
  for (std::int64_t b0 = k0; b0 < k1; b0 += kKTile) {
#pragma unroll
    for (int q = 0; q < kXSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      xs[kq][swizzle(kq, r)] = xv4[q].x, xs[kq + 1][swizzle(kq + 1, r)] = xv4[q].y;
      xs[kq + 2][swizzle(kq + 2, r)] = xv4[q].z, xs[kq + 3][swizzle(kq + 3, r)] = xv4[q].w;
    }
#pragma unroll
    for (int q = 0; q < kWSlots; ++q) {
      const int i = tid + q * kThreads, c = i / kGroups, kq = (i % kGroups) * 4;
      ws[kq][swizzle(kq, c)] = wv4[q].x, ws[kq + 1][swizzle(kq + 1, c)] = wv4[q].y;
      ws[kq + 2][swizzle(kq + 2, c)] = wv4[q].z, ws[kq + 3][swizzle(kq + 3, c)] = wv4[q].w;
    }
    __syncthreads();
    if (b0 + kKTile < k1) fetch(b0 + kKTile);
    // emu: the products of one 32-deep block summed in order into a fresh partial.
    float part[TM][TN] = {};
#pragma unroll 4
    for (int kk = 0; kk < kKTile; ++kk) {
      alignas(16) float xv[TM], wv[TN];  // read as float4 runs
      if constexpr (TM % 4 == 0) {
#pragma unroll
        for (int i = 0; i < TM; i += 4)
          *reinterpret_cast<float4*>(xv + i) = *reinterpret_cast<const float4*>(&xs[kk][swizzle(kk, row_of(i))]);
      } else {
#pragma unroll
        for (int i = 0; i < TM; ++i) xv[i] = xs[kk][swizzle(kk, row_of(i))];
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4)
        *reinterpret_cast<float4*>(wv + j) = *reinterpret_cast<const float4*>(&ws[kk][swizzle(kk, col_of(j))]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 2) {  // in pairs: an fp16 accumulator rounds two at once
          float v0 = kFma ? fmaf(xv[i], wv[j], part[i][j]) : add_rn(mul_rn(xv[i], wv[j]), part[i][j]);
          float v1 = kFma ? fmaf(xv[i], wv[j + 1], part[i][j + 1]) : add_rn(mul_rn(xv[i], wv[j + 1]), part[i][j + 1]);
          if constexpr (kAcc == Fmt::f16) {
            arith::round_f16_pair(v0, v1);
          } else if constexpr (kAcc != Fmt::f32) {
            v0 = arith::round_fmt(v0, kAcc), v1 = arith::round_fmt(v1, kAcc);
          }
          part[i][j] = v0, part[i][j + 1] = v1;
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        total[i][j] = kAcc == Fmt::f32 ? total[i][j] + part[i][j] : arith::add_fmt(total[i][j], part[i][j], kAcc);
    __syncthreads();
  }
  if (kAtomic && k0 >= k1) return;  // an empty split adds nothing
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t yr = y_row[row_of(i)];
    if (yr < 0) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const std::int64_t o = col0 + col_of(j);
      if (o >= a.O) continue;
      const float v = arith::round_fmt(total[i][j], a.out);
      if (kAtomic) atomic_add_fmt(&y[yr * a.ldy + o], v, a.out);
      else y[yr * a.ldy + o] = v;
    }
  }
}

// The matrix-core path (16-bit operands, float accumulator, fixed reduction): a BM x 128
// output tile per workgroup (BM = 128, or 32 for short products and the routed experts'
// gathered rows), split between its wavefronts as 2 x (waves/2) sub-tiles of 16x16
// matrix-core tiles, each accumulating over the whole K in 16-deep matrix products (gemm.h).
// (Keeping emu's 32-deep block partials cost a zeroing and an add per accumulator and block:
// with them the wavefronts issued more bookkeeping than matrix products.) 64 k are staged
// per LDS step, the next 64 fetched into registers meanwhile.
// float32 operands are converted to 16-bit patterns on their way to LDS (exactly: they are
// already rounded to the format), 16-bit patterns copied as they are; four at a time where
// rows are 16-byte aligned.
constexpr int kMmaBN = 128;
constexpr int kMmaStage = 2 * kKTile;  // k per LDS stage: two of emu's blocks between barriers
constexpr int kMmaLd = kMmaStage + 8;  // LDS row stride in 16-bit elements (a multiple of 8)

// Four consecutive 16-bit weight patterns (zeros outside the row or K: +0 in bf16 and fp16).
__device__ inline uint2 fetch4(const std::uint16_t* src, std::int64_t k, std::int64_t K, bool valid, bool vec4) {
  if (valid && vec4 && k + 3 < K) return *reinterpret_cast<const uint2*>(src + k);
  unsigned v[4];
  for (int j = 0; j < 4; ++j) v[j] = (valid && k + j < K) ? src[k + j] : 0u;
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
}

// Weight types of the matrix-core kernel besides float and 16-bit patterns: the release's
// codes, decoded while staged (QuantWeight).
struct Fp8Codes {};
struct Fp4Codes {};
template <class W>
constexpr bool kQuant = std::is_same_v<W, Fp8Codes> || std::is_same_v<W, Fp4Codes>;

// The 16-bit operand pattern of one decoded weight: the float32 value of code x scale
// (emu/release_codes.h), rounded as an operand as quantize_weight rounds a loaded weight.
template <bool kBf16>
__device__ inline unsigned quant_bits(float code, float scale) {
  return mma::bits16(arith::mfma_operand(arith::mul_rn(code, scale), kBf16 ? Fmt::bf16 : Fmt::f16), kBf16);
}

// The bf16 pattern of a code value times 2^s, when the product is a normal bf16 number: the
// exponent field of the value's pattern moved by s (the same bits as quant_bits, which
// rounds an exact product: tested). Zero stays zero.
__device__ inline unsigned scaled_bf16(unsigned value_bits, int s) {
  return (value_bits & 0x7fffu) == 0 ? value_bits : static_cast<unsigned>(static_cast<int>(value_bits) + s * 128);
}
// The bf16 pattern of e2m1 code c (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), without a table.
__device__ inline unsigned e2m1_bf16(unsigned c) {
  const unsigned m = c & 7u;
  const unsigned mag = m == 0 ? 0u : m == 1 ? 0x3f00u : ((126u + (m >> 1)) << 7) | ((m & 1u) << 6);
  return mag | ((c & 8u) << 12);
}

// Weights k .. k + 3 of weight row `row` (zeros outside the row or K), decoded. bf16 operands
// of power-of-two scales that keep every value of the block normal in bf16 (E8M0 exponents
// 2..252 for FP4, float scales 2^-117..2^119 for FP8) take the exponent shift, a few integer
// operations a weight; everything else (fp16 operands, other scales) the general rule.
template <bool kBf16, class W>
__device__ inline uint2 fetch4_codes(const Args& a, std::int64_t row, std::int64_t k, bool valid) {
  unsigned v[4] = {0u, 0u, 0u, 0u};
  if (valid) {
    if constexpr (std::is_same_v<W, Fp8Codes>) {
      const std::uint8_t* codes = a.q.codes + row * a.K;
      const float* scale = a.q.block_scale + (row / 128) * a.q_scale_ld;
      if (a.q_vec4 && k + 3 < a.K) {  // k % 4 == 0: one 128-column block
        const std::uint32_t c4 = *reinterpret_cast<const std::uint32_t*>(codes + k);
        const float sc = scale[k / 128];
        const std::uint32_t sb = arith::float_bits(sc);
        const int field = static_cast<int>(sb >> 23);
        if (kBf16 && (sb & 0x807fffffu) == 0 && field >= 10 && field <= 246) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            v[j] = scaled_bf16(arith::float_bits(arith::e4m3_value(static_cast<std::uint8_t>(c4 >> (8 * j)))) >> 16, field - 127);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = quant_bits<kBf16>(arith::e4m3_value(static_cast<std::uint8_t>(c4 >> (8 * j))), sc);
        }
      } else {
        for (int j = 0; j < 4; ++j)
          if (k + j < a.K) v[j] = quant_bits<kBf16>(arith::e4m3_value(codes[k + j]), scale[(k + j) / 128]);
      }
    } else {
      const std::uint8_t* codes = a.q.codes + row * ((a.K + 1) / 2);
      const std::uint8_t* e8m0 = a.q.e8m0 + row * a.q_scale_ld;
      if (a.q_vec4 && k + 3 < a.K) {  // k % 4 == 0: two whole bytes in one 32-column group
        const unsigned c4 = *reinterpret_cast<const std::uint16_t*>(codes + k / 2);
        const int e = e8m0[k / 32];
        if (kBf16 && e >= 2 && e <= 252) {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = scaled_bf16(e2m1_bf16(c4 >> (4 * j)), e - 127);
        } else {
          const float sc = arith::e8m0_value(static_cast<std::uint8_t>(e));
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = quant_bits<kBf16>(arith::e2m1_value(static_cast<std::uint8_t>(c4 >> (4 * j))), sc);
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const std::int64_t c = k + j;
          if (c < a.K)
            v[j] = quant_bits<kBf16>(arith::e2m1_value(static_cast<std::uint8_t>(codes[c / 2] >> (4 * (c % 2)))),
                                     arith::e8m0_value(e8m0[c / 32]));
        }
      }
    }
  }
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
}

// Four operands' 16-bit patterns into LDS (converted exactly: they are already rounded to
// the format), or four patterns as they are.
template <bool kBf16>
__device__ inline void put4(std::uint16_t* dst, uint2 v) {
  *reinterpret_cast<uint2*>(dst) = v;
}
template <bool kBf16>
__device__ inline void put4(std::uint16_t* dst, float4 v) {
  uint2 packed;
  packed.x = mma::bits16(v.x, kBf16) | (static_cast<unsigned>(mma::bits16(v.y, kBf16)) << 16);
  packed.y = mma::bits16(v.z, kBf16) | (static_cast<unsigned>(mma::bits16(v.w, kBf16)) << 16);
  *reinterpret_cast<uint2*>(dst) = packed;
}

// X, W: float (float32 values holding 16-bit values) or std::uint16_t (their patterns); W
// also Fp8Codes / Fp4Codes (a release weight, decoded on its way to LDS).
template <bool kBf16, int BM, typename X, typename W>
__global__ void __launch_bounds__(kThreads) gemm_mma_kernel(Args a, bool vec4) {
  constexpr int kWaves = kThreads / kWaveSize;
  constexpr int kWavesN = kWaves / 2;
  constexpr int kTilesM = BM / 2 / 16;
  constexpr int kTilesN = kMmaBN / kWavesN / 16;
  static_assert(kWaves >= 2 && kTilesM >= 1 && kTilesN >= 1, "two rows of wavefronts");
  // 32-byte aligned: wmma loads and stores need 256-bit aligned tile pointers (every tile
  // starts a multiple of 16 rows of 144 bytes, plus a multiple of 32 bytes, from these bases).
  __shared__ std::uint16_t xs[BM * kMmaLd] __attribute__((aligned(32)));
  __shared__ std::uint16_t ws[kMmaBN * kMmaLd] __attribute__((aligned(32)));
  __shared__ float tile_out[kWaves][16 * 16] __attribute__((aligned(32)));
  __shared__ std::int64_t x_row[BM], y_row[BM];

  const std::int64_t g = blockIdx.z;
  std::int64_t rows = a.M, first = 0;
  if (a.rows) first = a.starts[g], rows = a.starts[g + 1] - first;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= rows) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kMmaBN;
  const int tid = threadIdx.x, wave = tid / kWaveSize, lane = tid % kWaveSize;
  const int wm = wave / kWavesN, wn = wave % kWavesN;
  for (int i = tid; i < BM; i += kThreads) {
    const std::int64_t r = row0 + i;
    if (r < rows) {
      if (a.rows) {
        const std::int64_t e = a.rows[first + r];
        x_row[i] = e / a.a_div, y_row[i] = e;
      } else {
        x_row[i] = r, y_row[i] = r;
      }
    } else {
      x_row[i] = -1, y_row[i] = -1;
    }
  }
  const X* x = [&] {
    if constexpr (std::is_same_v<X, float>) return a.x + g * a.x_stride;
    else return a.x16 + g * a.x_stride;
  }();
  const auto* w = [&] {
    if constexpr (std::is_same_v<W, float>) return a.w + g * a.w_stride;
    else if constexpr (std::is_same_v<W, std::uint16_t>) return a.w16 + g * a.w_stride;
    else return a.q.codes;  // unused: fetch4_codes addresses the stacked rows
  }();
  float* y = a.y + g * a.y_stride;

  mma::Acc total[kTilesM][kTilesN];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) mma::zero(total[i][j]);
  __syncthreads();
  // Four consecutive k per thread and slot, BM (x) and 128 (w) rows of 8 groups; the next
  // block's operands are fetched into registers while this block's products run.
  constexpr int kGroups = kMmaStage / 4;
  constexpr int kXSlots = BM * kGroups / kThreads, kWSlots = kMmaBN * kGroups / kThreads;
  static_assert(BM * kGroups % kThreads == 0 && kMmaBN * kGroups % kThreads == 0, "whole slots");
  std::conditional_t<std::is_same_v<X, float>, float4, uint2> xv[kXSlots];
  std::conditional_t<std::is_same_v<W, float>, float4, uint2> wv[kWSlots];
  auto fetch = [&](std::int64_t b0) {
#pragma unroll
    for (int q = 0; q < kXSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      const std::int64_t xr = x_row[r];
      xv[q] = fetch4(x + (xr >= 0 ? xr : 0) * a.ldx, b0 + kq, a.K, xr >= 0, vec4);
    }
#pragma unroll
    for (int q = 0; q < kWSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      const std::int64_t o = col0 + r;
      if constexpr (kQuant<W>) wv[q] = fetch4_codes<kBf16, W>(a, g * a.q_group_rows + o, b0 + kq, o < a.O);
      else wv[q] = fetch4(w + (o < a.O ? o : 0) * a.K, b0 + kq, a.K, o < a.O, vec4);
    }
  };
  fetch(0);
  for (std::int64_t b0 = 0; b0 < a.K; b0 += kMmaStage) {
#pragma unroll
    for (int q = 0; q < kXSlots; ++q) {
      const int i = tid + q * kThreads;
      put4<kBf16>(xs + (i / kGroups) * kMmaLd + (i % kGroups) * 4, xv[q]);
    }
#pragma unroll
    for (int q = 0; q < kWSlots; ++q) {
      const int i = tid + q * kThreads;
      put4<kBf16>(ws + (i / kGroups) * kMmaLd + (i % kGroups) * 4, wv[q]);
    }
    __syncthreads();
    if (b0 + kMmaStage < a.K) fetch(b0 + kMmaStage);
#pragma unroll
    for (int ks = 0; ks < kMmaStage; ks += 16) {
      if (b0 + ks >= a.K) break;
      mma::ATile<kBf16> at[kTilesM];
      mma::BTile<kBf16> bt[kTilesN];
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) mma::load_a<kBf16>(at[i], xs + (wm * kTilesM + i) * 16 * kMmaLd + ks, kMmaLd);
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) mma::load_b<kBf16>(bt[j], ws + (wn * kTilesN + j) * 16 * kMmaLd + ks, kMmaLd);
#pragma unroll
      for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j) mma::mma<kBf16>(total[i][j], at[i], bt[j]);
    }
    __syncthreads();
  }
  // Out through a per-wavefront 16x16 LDS tile (the accumulator's lane layout is the vendor's).
  float* t = tile_out[wave];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      mma::store(total[i][j], t, 16);
      __syncthreads();
      for (int e = lane; e < 256; e += kWaveSize) {
        const int r = (wm * kTilesM + i) * 16 + e / 16;
        const std::int64_t yr = y_row[r], o = col0 + (wn * kTilesN + j) * 16 + e % 16;
        if (yr >= 0 && o < a.O) y[yr * a.ldy + o] = arith::round_fmt(t[e], a.out);
      }
      __syncthreads();
    }
}

// The pipelined matrix-core kernel: both operands as 16-bit patterns, copied into LDS by
// asynchronous 16-byte copies kPipeStages - 1 blocks ahead of the products (vendor.h), so that the
// loads of later blocks overlap this block's matrix products and one barrier per 32-deep
// block remains. Otherwise the same arithmetic as gemm_mma_kernel, product for product (the
// same bits): BM x 128 tiles, 2 x (waves/2) wavefront sub-tiles, 16-deep products in k
// order. Needs K, the row strides and group strides in whole 16-byte chunks (8 elements)
// and 16-byte aligned bases; chunks outside the rows or K are zero-filled.
constexpr int kPipeStages = async::kStages;  // LDS stages: 4 on NVIDIA (84 KB at BM = 128), 2 on AMD
// KT: k per stage (32 or 64: 64-byte or whole 128-byte runs of each weight row per copy
// round). LDS rows of KT + 8 elements (80 or 144 bytes): the 8 rows of a 16-byte-per-lane
// fragment load fall into 8 different groups of 4 banks.
template <int KT>
constexpr int pipe_ld() {
  return KT + 8;
}

template <int BM, int KT>
constexpr std::size_t pipe_lds_bytes() {
  return static_cast<std::size_t>(kPipeStages) * (BM + kMmaBN) * pipe_ld<KT>() * 2 + 2 * BM * sizeof(std::int64_t);
}
// Workgroups that fit on one SM by LDS (227 KB usable on sm_90, 1 KB reserved per block), at
// most 4: the register budget per thread follows from it.
template <int BM, int KT>
constexpr int pipe_per_sm() {
  const int n = static_cast<int>(227 * 1024 / (pipe_lds_bytes<BM, KT>() + 1024));
  return n < 1 ? 1 : n > 4 ? 4 : n;
}

template <bool kBf16, int BM, int KT>
__global__ void TDIFF_LAUNCH_BOUNDS(kThreads, (pipe_per_sm<BM, KT>())) gemm_mma_pipe_kernel(Args a) {
  constexpr int kPipeLd = pipe_ld<KT>();
  constexpr int kWaves = kThreads / kWaveSize;
  constexpr int kWavesN = kWaves / 2;
  constexpr int kTilesM = BM / 2 / 16;
  constexpr int kTilesN = kMmaBN / kWavesN / 16;
  constexpr int kStage = (BM + kMmaBN) * kPipeLd;  // elements per stage: x rows, then w rows
  constexpr int kChunks = KT / 8;                  // 16-byte chunks per row and block
  static_assert(kWaves >= 2 && kTilesM >= 1 && kTilesN >= 1, "two rows of wavefronts");
  static_assert(kPipeStages >= 2, "a stage read while the next is written");
  static_assert(kWaves * 16 * 16 * sizeof(float) <= kStage * 2, "the output tiles fit in stage 0");
  // Stage s at lds + s * kStage (every stage a multiple of 32 bytes: wmma's tile alignment);
  // the row tables after the stages.
  extern __shared__ __attribute__((aligned(128))) std::uint16_t lds[];
  auto* x_row = reinterpret_cast<std::int64_t*>(lds + kPipeStages * kStage);
  std::int64_t* y_row = x_row + BM;

  const std::int64_t g = blockIdx.z;
  std::int64_t rows = a.M, first = 0;
  if (a.rows) first = a.starts[g], rows = a.starts[g + 1] - first;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= rows) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kMmaBN;
  const int tid = threadIdx.x, wave = tid / kWaveSize, lane = tid % kWaveSize;
  const int wm = wave / kWavesN, wn = wave % kWavesN;
  for (int i = tid; i < BM; i += kThreads) {
    const std::int64_t r = row0 + i;
    if (r < rows) {
      if (a.rows) {
        const std::int64_t e = a.rows[first + r];
        x_row[i] = e / a.a_div, y_row[i] = e;
      } else {
        x_row[i] = r, y_row[i] = r;
      }
    } else {
      x_row[i] = -1, y_row[i] = -1;
    }
  }
  __syncthreads();
  const std::uint16_t* x = a.x16 + g * a.x_stride;
  const std::uint16_t* w = a.w16 + g * a.w_stride;
  float* y = a.y + g * a.y_stride;

  // A thread's 16-byte chunks keep their row and column from block to block: their sources
  // (null outside the rows) and LDS offsets are worked out once.
  constexpr int kXCopies = (BM * kChunks + kThreads - 1) / kThreads, kWCopies = kMmaBN * kChunks / kThreads;
  static_assert(kMmaBN * kChunks % kThreads == 0, "whole weight chunks per thread");
  const std::uint16_t* x_src[kXCopies];
  const std::uint16_t* w_src[kWCopies];
  int x_dst[kXCopies], w_dst[kWCopies], x_col[kXCopies], w_col[kWCopies];
#pragma unroll
  for (int q = 0; q < kXCopies; ++q) {
    const int i = tid + q * kThreads, r = i / kChunks, c = (i % kChunks) * 8;
    const std::int64_t xr = i < BM * kChunks ? x_row[r] : -1;
    x_src[q] = xr >= 0 ? x + xr * a.ldx + c : nullptr;
    x_dst[q] = r * kPipeLd + c, x_col[q] = c;
  }
#pragma unroll
  for (int q = 0; q < kWCopies; ++q) {
    const int i = tid + q * kThreads, r = i / kChunks, c = (i % kChunks) * 8;
    w_src[q] = col0 + r < a.O ? w + (col0 + r) * a.K + c : nullptr;
    w_dst[q] = BM * kPipeLd + r * kPipeLd + c, w_col[q] = c;
  }
  auto load_block = [&](std::int64_t block) {
    std::uint16_t* stage = lds + (block % kPipeStages) * kStage;
    const std::int64_t k0 = block * KT;
#pragma unroll
    for (int q = 0; q < kXCopies; ++q) {
      if (tid + q * kThreads >= BM * kChunks) break;
      const bool valid = x_src[q] && k0 + x_col[q] < a.K;
      async::copy16(stage + x_dst[q], valid ? x_src[q] + k0 : x, valid);
    }
#pragma unroll
    for (int q = 0; q < kWCopies; ++q) {
      const bool valid = w_src[q] && k0 + w_col[q] < a.K;
      async::copy16(stage + w_dst[q], valid ? w_src[q] + k0 : w, valid);
    }
  };

  mma::Acc total[kTilesM][kTilesN];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) mma::zero(total[i][j]);
  const std::int64_t blocks = (a.K + KT - 1) / KT;
#pragma unroll
  for (int s = 0; s < kPipeStages - 1; ++s) {
    if (s < blocks) load_block(s);
    async::commit();  // empty groups too: the wait below counts groups
  }
  for (std::int64_t block = 0; block < blocks; ++block) {
    async::wait<kPipeStages - 2>();  // this block's copies (issued by this thread) are done,
    __syncthreads();                 // and everyone's; the stage read last round is free
    if (block + kPipeStages - 1 < blocks) load_block(block + kPipeStages - 1);
    async::commit();
    const std::uint16_t* xs = lds + (block % kPipeStages) * kStage;
    const std::uint16_t* ws = xs + BM * kPipeLd;
#pragma unroll
    for (int ks = 0; ks < KT; ks += 16) {
      mma::ATile<kBf16> at[kTilesM];
      mma::BTile<kBf16> bt[kTilesN];
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) mma::load_a<kBf16>(at[i], xs + (wm * kTilesM + i) * 16 * kPipeLd + ks, kPipeLd);
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) mma::load_b<kBf16>(bt[j], ws + (wn * kTilesN + j) * 16 * kPipeLd + ks, kPipeLd);
#pragma unroll
      for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j) mma::mma<kBf16>(total[i][j], at[i], bt[j]);
    }
  }
  async::wait<0>();
  __syncthreads();  // the stages are free: stage 0 holds the per-wavefront output tiles
  float* t = reinterpret_cast<float*>(lds) + wave * 16 * 16;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      mma::store(total[i][j], t, 16);
      __syncthreads();
      for (int e = lane; e < 256; e += kWaveSize) {
        const int r = (wm * kTilesM + i) * 16 + e / 16;
        const std::int64_t yr = y_row[r], o = col0 + (wn * kTilesN + j) * 16 + e % 16;
        if (yr >= 0 && o < a.O) y[yr * a.ldy + o] = arith::round_fmt(t[e], a.out);
      }
      __syncthreads();
    }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether every operand row starts 16-byte aligned, so four consecutive k load as one float4
// (or four 16-bit patterns as 8 bytes).
bool float4_rows(const Args& a) {
  return a.ldx % 4 == 0 && a.K % 4 == 0 && a.x_stride % 4 == 0 && a.w_stride % 4 == 0 &&
         aligned16(a.x16 ? static_cast<const void*>(a.x16) : a.x) &&
         (a.q.codes || aligned16(a.w16 ? static_cast<const void*>(a.w16) : a.w));
}

// Whether the pipelined kernel applies: copies that overlap the products (NVIDIA), 16-bit
// patterns on both sides, every row and group in whole 16-byte chunks.
bool pipe_rows(const Args& a) {
  return async::kOverlaps && a.x16 && a.w16 && a.ldx % 8 == 0 && a.K % 8 == 0 && a.x_stride % 8 == 0 && a.w_stride % 8 == 0 &&
         aligned16(a.x16) && aligned16(a.w16);
}

template <bool kBf16, int BM, int KT>
void launch_pipe(const Args& a, std::int64_t groups, hipStream_t stream) {
  constexpr std::size_t lds = pipe_lds_bytes<BM, KT>();
  const auto kernel = gemm_mma_pipe_kernel<kBf16, BM, KT>;
  static const bool opted_in = [&] {  // once per kernel and process
    return lds <= 48 * 1024 || hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                   hipFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(lds)) == hipSuccess;
  }();
  if (!opted_in) check_kernel("gemm: LDS opt-in");
  const dim3 grid(blocks_for(a.O, kMmaBN), blocks_for(a.M, BM), static_cast<unsigned>(groups));
  kernel<<<grid, kThreads, lds, stream>>>(a);
}

template <bool kBf16, int BM, typename X>
void launch_mma_tile(const Args& a, std::int64_t groups, bool vec4, hipStream_t stream) {
  const dim3 grid(blocks_for(a.O, kMmaBN), blocks_for(a.M, BM), static_cast<unsigned>(groups));
  if (a.q.codes && a.q.format == QuantWeight::Format::fp8) gemm_mma_kernel<kBf16, BM, X, Fp8Codes><<<grid, kThreads, 0, stream>>>(a, vec4);
  else if (a.q.codes) gemm_mma_kernel<kBf16, BM, X, Fp4Codes><<<grid, kThreads, 0, stream>>>(a, vec4);
  else if (a.w16) gemm_mma_kernel<kBf16, BM, X, std::uint16_t><<<grid, kThreads, 0, stream>>>(a, vec4);
  else gemm_mma_kernel<kBf16, BM, X, float><<<grid, kThreads, 0, stream>>>(a, vec4);
}

// 128-row tiles for long dense products, 32 for short ones and the routed experts' gathered
// rows (a few dozen per expert); tile_rows / tile_k override (bench_gemm).
// Streaming multiprocessors (compute units) of the current device, asked once.
int device_sms() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (hipGetDevice(&dev) != hipSuccess || hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess)
      return 0;
    return n;
  }();
  return sms;
}

template <bool kBf16>
void launch_mma(const Args& a, std::int64_t groups, int tile_rows, int tile_k, hipStream_t stream) {
  // 128-row tiles when they give every SM a workgroup; a product with few output columns
  // (q_a, kv, the router, the shared expert's gate and up: 1024 x 4096 -> 1024 / 512 / 256 /
  // 2048) takes 32-row tiles instead, four times the workgroups (the same products in the
  // same order: the same bits). At twice the SMs as the bar, o_b (256 workgroups of 128 rows)
  // lost a third on 32-row tiles on the H200.
  bool tall = !a.rows && a.M >= 96 &&
                    static_cast<std::int64_t>(blocks_for(a.O, kMmaBN)) * blocks_for(a.M, 128) * groups >= device_sms();
  if (pipe_rows(a)) {
    // bench_gemm (H200): 128 x 32-deep for tall products; 32-row tiles (the routed experts' few
    // dozen rows per expert, short products) stream the weight, which 64-deep stages read in
    // whole 128-byte runs per row: 3.4 instead of 2.2 TB/s on the experts.
    if (tile_rows == 0) tile_rows = tall ? 128 : 32;
    if (tile_k == 0) tile_k = tile_rows == 32 ? 64 : 32;
    if (tile_rows == 128) {
      if (tile_k == 64) launch_pipe<kBf16, 128, 64>(a, groups, stream);
      else launch_pipe<kBf16, 128, 32>(a, groups, stream);
    } else if (tile_rows == 64) {
      if (tile_k == 64) launch_pipe<kBf16, 64, 64>(a, groups, stream);
      else launch_pipe<kBf16, 64, 32>(a, groups, stream);
    } else {
      if (tile_k == 64) launch_pipe<kBf16, 32, 64>(a, groups, stream);
      else launch_pipe<kBf16, 32, 32>(a, groups, stream);
    }
    return;
  }
  const bool vec4 = float4_rows(a);
  // The register-staged kernel has 32- and 128-row tiles: a caller's 64 takes 128.
  if (tile_rows) tall = tile_rows >= 64;
  if (a.x16) {
    if (tall) launch_mma_tile<kBf16, 128, std::uint16_t>(a, groups, vec4, stream);
    else launch_mma_tile<kBf16, 32, std::uint16_t>(a, groups, vec4, stream);
  } else {
    if (tall) launch_mma_tile<kBf16, 128, float>(a, groups, vec4, stream);
    else launch_mma_tile<kBf16, 32, float>(a, groups, vec4, stream);
  }
}

// Tile shapes: 128x128 for large products, 32x128 for short ones (the routed experts see a
// few dozen rows per expert).
template <int BM, int BN, int TM, int TN, bool kFma, Fmt kAcc>
void launch_tile(const Args& a, std::int64_t groups, bool atomic, hipStream_t stream) {
  const dim3 grid(blocks_for(a.O, BN), blocks_for(a.M, BM), static_cast<unsigned>(groups * (atomic ? kSplits : 1)));
  const bool vec4 = float4_rows(a);
  if (atomic) gemm_kernel<BM, BN, TM, TN, kFma, kAcc, true><<<grid, kThreads, 0, stream>>>(a, vec4);
  else gemm_kernel<BM, BN, TM, TN, kFma, kAcc, false><<<grid, kThreads, 0, stream>>>(a, vec4);
}
template <bool kFma, Fmt kAcc>
void launch_shape(const Args& a, std::int64_t groups, bool atomic, hipStream_t stream) {
  if (a.M >= 96) launch_tile<128, 128, 8, 8, kFma, kAcc>(a, groups, atomic, stream);
  else launch_tile<32, 128, 2, 8, kFma, kAcc>(a, groups, atomic, stream);
}
template <bool kFma>
void launch(const Args& a, std::int64_t groups, bool atomic, hipStream_t stream) {
  switch (a.acc) {
    case Fmt::f32: launch_shape<kFma, Fmt::f32>(a, groups, atomic, stream); break;
    case Fmt::bf16: launch_shape<kFma, Fmt::bf16>(a, groups, atomic, stream); break;
    case Fmt::f16: launch_shape<kFma, Fmt::f16>(a, groups, atomic, stream); break;
    default: throw std::runtime_error("gemm: no accumulator of this format");
  }
}

// Every float bit pattern u once, as the first of a pair (the second its neighbour u ^ 1, so
// both lanes of the paired conversion meet every pattern).
__global__ void round_f16_pair_check_kernel(unsigned long long* mismatches) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t u = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < (std::uint64_t{1} << 32);
       u += stride) {
    const float x = arith::bits_float(static_cast<std::uint32_t>(u)), y = arith::bits_float(static_cast<std::uint32_t>(u) ^ 1u);
    float a = x, b = y;
    arith::round_f16_pair(a, b);
    bad += arith::float_bits(a) != arith::float_bits(arith::round_f16(x));
    bad += arith::float_bits(b) != arith::float_bits(arith::round_f16(y));
  }
  if (bad) atomicAdd(mismatches, bad);
}

__global__ void bits16_kernel(const float* src, std::uint16_t* dst, std::int64_t n, bool bf16) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::bits16(src[i], bf16);
}

__global__ void operand_bits16_kernel(const float* src, std::uint16_t* dst, std::int64_t n, Fmt in) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::bits16(arith::mfma_operand(src[i], in), in == Fmt::bf16);
}

__global__ void inexact_kernel(const float* v, std::int64_t n, Fmt in, int* flag) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && arith::float_bits(arith::mfma_operand(v[i], in)) != arith::float_bits(v[i])) atomicOr(flag, 1);
}

__global__ void widen_kernel(const std::uint16_t* src, float* dst, std::int64_t n, bool bf16) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = mma::from_bits16(src[i], bf16);
}

__global__ void operand_kernel(const float* src, float* dst, std::int64_t n, Fmt in) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = arith::mfma_operand(src[i], in);
}

// Block max of |v| (max is exact and order-free, so any tree gives the same bits).
template <int kN>
__device__ float block_amax(float v) {
  __shared__ float red[kN];
  red[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (int s = kN / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// One workgroup of 128 threads per (row, 128-column group).
__global__ void act_fp8_kernel(const float* src, float* dst, std::int64_t cols, std::int64_t segment,
                               std::int64_t groups_per_segment) {
  const std::int64_t row = blockIdx.y;
  const std::int64_t seg = blockIdx.x / groups_per_segment, grp = blockIdx.x % groups_per_segment;
  const std::int64_t c0 = seg * segment + grp * 128;
  const std::int64_t c1 = std::min(std::min(cols, (seg + 1) * segment), c0 + 128);
  const std::int64_t c = c0 + threadIdx.x;
  const float v = c < c1 ? src[row * cols + c] : 0.0f;
  const float amax = block_amax<128>(v);
  const float s = amax > 0 ? amax / 448.0f : 1.0f;
  if (c < c1) dst[row * cols + c] = arith::round_f8(v / s) * s;
}

// One workgroup of 256 threads per 128x128 block.
__global__ void weight_fp8_kernel(float* w, std::int64_t rows, std::int64_t cols) {
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * 128, c0 = static_cast<std::int64_t>(blockIdx.x) * 128;
  float m = 0;
  for (int i = threadIdx.x; i < 128 * 128; i += 256) {
    const std::int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < rows && c < cols) m = fmaxf(m, fabsf(w[r * cols + c]));
  }
  const float amax = block_amax<256>(m);
  float s = 1.0f;
  if (amax > 0) {
    // emu: exp2(ceil(log2(amax / 448))) with a float log2; log2 in double rounded to float
    // is that correctly rounded float log2.
    const float l = static_cast<float>(log2(static_cast<double>(amax / 448.0f)));
    s = ldexpf(1.0f, static_cast<int>(ceilf(l)));
  }
  for (int i = threadIdx.x; i < 128 * 128; i += 256) {
    const std::int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < rows && c < cols) {
      float& v = w[r * cols + c];
      v = arith::round_f8(v / s) * s;
    }
  }
}

// One float32 weight value of a release weight (row, column), as the GEMM kernels decode it.
__device__ inline float decoded(const QuantWeight& q, std::int64_t row, std::int64_t k, std::int64_t K) {
  if (q.format == QuantWeight::Format::fp8)
    return arith::mul_rn(arith::e4m3_value(q.codes[row * K + k]), q.block_scale[(row / 128) * ((K + 127) / 128) + k / 128]);
  const std::uint8_t pair = q.codes[row * ((K + 1) / 2) + k / 2];
  return arith::mul_rn(arith::e2m1_value(static_cast<std::uint8_t>(pair >> (4 * (k % 2)))), arith::e8m0_value(q.e8m0[row * ((K + 31) / 32) + k / 32]));
}

__global__ void dequantize_kernel(QuantWeight q, std::int64_t rows, std::int64_t K, float* dst) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * K) dst[i] = decoded(q, i / K, i % K, K);
}

__global__ void decode_bits16_kernel(QuantWeight q, std::int64_t rows, std::int64_t K, Fmt in, std::uint16_t* dst) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * K) dst[i] = mma::bits16(arith::mfma_operand(decoded(q, i / K, i % K, K), in), in == Fmt::bf16);
}

__global__ void nan_codes_kernel(const std::uint8_t* codes, std::int64_t n, int* flag) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && (codes[i] & 0x7fu) == 0x7fu) atomicOr(flag, 1);
}

}  // namespace

void dequantize_weight(const QuantWeight& w, std::int64_t rows, std::int64_t K, float* d_dst, hipStream_t stream) {
  const std::int64_t n = rows * K;
  if (n == 0) return;
  dequantize_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w, rows, K, d_dst);
  check_kernel("dequantize_weight");
}

void decode_weight_bits16(const QuantWeight& w, std::int64_t rows, std::int64_t K, Fmt in, std::uint16_t* d_dst,
                          hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("decode_weight_bits16: the format is not 16-bit");
  const std::int64_t n = rows * K;
  if (n == 0) return;
  decode_bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w, rows, K, in, d_dst);
  check_kernel("decode_weight_bits16");
}

void mark_nan_codes(const QuantWeight& w, std::int64_t rows, std::int64_t K, int* d_flag, hipStream_t stream) {
  if (w.format != QuantWeight::Format::fp8) throw std::logic_error("mark_nan_codes: E2M1 has no NaN codes");
  const std::int64_t n = rows * K;
  if (n == 0) return;
  nan_codes_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w.codes, n, d_flag);
  check_kernel("mark_nan_codes");
}

bool has_matrix_cores(const std::string& arch) { return vendor::has_matrix_cores(arch); }

bool runs_on_matrix_cores(const GemmSpec& spec) {
  // Products of two 16-bit operands are exact in float, so the matrix cores' float sums of
  // them are the only difference from emu.
  return (spec.in == Fmt::bf16 || spec.in == Fmt::f16) && spec.acc == Fmt::f32 && spec.matrix_cores && !spec.atomic;
}

void gemm(GemmInput x, std::int64_t ldx, GemmWeight w, float* d_y, std::int64_t ldy, std::int64_t M,
          std::int64_t K, std::int64_t O, const GemmSpec& spec, hipStream_t stream, const GemmGroups& groups) {
  if (M <= 0 || O <= 0) return;
  if (groups.tile_rows != 0 && groups.tile_rows != 32 && groups.tile_rows != 64 && groups.tile_rows != 128)
    throw std::logic_error("gemm: tile_rows must be 0, 32, 64 or 128");
  if (groups.tile_k != 0 && groups.tile_k != 32 && groups.tile_k != 64) throw std::logic_error("gemm: tile_k must be 0, 32 or 64");
  const bool mma = runs_on_matrix_cores(spec);
  if ((w.bits16 || x.bits16) && !mma) throw std::logic_error("gemm: 16-bit operand patterns outside the matrix-core path");
  if (w.quant.codes && !mma) throw std::logic_error("gemm: a release weight as stored outside the matrix-core path");
  Args a{x.f32, x.bits16, w.f32, w.bits16, d_y, ldx, ldy, M, K, O, groups.x_stride, groups.w_stride, groups.y_stride,
         groups.d_rows, groups.d_starts, groups.a_div, 0, spec.acc, spec.out, w.quant, 0, 0, false};
  if (w.quant.codes) {
    if (groups.count > 1 && groups.w_stride % K != 0) throw std::logic_error("gemm: a release weight's groups are not whole rows");
    a.q_group_rows = groups.w_stride / K;
    const bool fp8 = w.quant.format == QuantWeight::Format::fp8;
    a.q_scale_ld = fp8 ? (K + 127) / 128 : (K + 31) / 32;
    // Rows of whole 4-byte (fp8) or 2-byte (fp4) words for four codes.
    a.q_vec4 = K % 4 == 0 && reinterpret_cast<std::uintptr_t>(w.quant.codes) % 4 == 0;
  }
  if (spec.atomic) {
    a.per_split = (K + kSplits * kKStep - 1) / (kSplits * kKStep) * kKStep;
    // Zero every element the groups write: y_rows x ldy from d_y when given, else the M rows
    // of every group.
    const std::int64_t span = groups.y_rows ? groups.y_rows * ldy : (groups.count - 1) * groups.y_stride + M * ldy;
    if (groups.zero_output && hipMemsetAsync(d_y, 0, static_cast<std::size_t>(span) * sizeof(float), stream) != hipSuccess)
      check_kernel("gemm: zeroing the split-K output");
  }
  // fp8 activations carry a float scale (amax/448), so their products are not exact and take
  // the rounded-product path.
  const bool exact = spec.in == Fmt::bf16 || spec.in == Fmt::f16;
  const bool f32 = spec.acc == Fmt::f32;
  if (mma) {
    if (spec.in == Fmt::bf16) launch_mma<true>(a, groups.count, groups.tile_rows, groups.tile_k, stream);
    else launch_mma<false>(a, groups.count, groups.tile_rows, groups.tile_k, stream);
  } else if (exact || (spec.in == Fmt::f32 && f32)) {
    launch<true>(a, groups.count, spec.atomic, stream);  // 16-bit operands, or an SGEMM (FMA)
  } else {
    launch<false>(a, groups.count, spec.atomic, stream);
  }
  check_kernel("gemm");
}

void quantize_activations(const float* d_src, float* d_dst, std::int64_t rows, std::int64_t cols, std::int64_t segment,
                          Fmt in, hipStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  if (in != Fmt::f8) {
    if (in == Fmt::f32 && d_src == d_dst) return;
    operand_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in);
    check_kernel("quantize_activations");
    return;
  }
  if (segment <= 0 || segment > cols) segment = cols;
  const std::int64_t per_seg = (segment + 127) / 128;
  const dim3 grid(static_cast<unsigned>(per_seg * ((cols + segment - 1) / segment)), static_cast<unsigned>(rows));
  act_fp8_kernel<<<grid, 128, 0, stream>>>(d_src, d_dst, cols, segment, per_seg);
  check_kernel("quantize_activations fp8");
}

void quantize_weight(float* d_w, std::int64_t rows, std::int64_t cols, Fmt in, hipStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n == 0 || in == Fmt::f32) return;
  if (in != Fmt::f8) {
    operand_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_w, d_w, n, in);
    check_kernel("quantize_weight");
    return;
  }
  const dim3 grid(blocks_for(cols, 128), blocks_for(rows, 128));
  weight_fp8_kernel<<<grid, 256, 0, stream>>>(d_w, rows, cols);
  check_kernel("quantize_weight fp8");
}

void mark_inexact_operands(const float* d_v, std::int64_t n, Fmt in, int* d_flag, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("mark_inexact_operands: the format is not 16-bit");
  if (n == 0) return;
  inexact_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_v, n, in, d_flag);
  check_kernel("mark_inexact_operands");
}

void widen_bits16(const std::uint16_t* d_src, float* d_dst, std::int64_t n, Fmt in, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("widen_bits16: the format is not 16-bit");
  if (n == 0) return;
  widen_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in == Fmt::bf16);
  check_kernel("widen_bits16");
}

void pack_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, Fmt in, hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("pack_bits16: the format is not 16-bit");
  if (n == 0) return;
  bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in == Fmt::bf16);
  check_kernel("pack_bits16");
}

void quantize_activations_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, Fmt in,
                                 hipStream_t stream) {
  if (in != Fmt::bf16 && in != Fmt::f16) throw std::logic_error("quantize_activations_bits16: the format is not 16-bit");
  if (n == 0) return;
  operand_bits16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(d_src, d_dst, n, in);
  check_kernel("quantize_activations_bits16");
}

std::uint64_t round_f16_pair_mismatches(hipStream_t stream) {
  DeviceBuffer count(sizeof(unsigned long long));
  memset_async(count.get(), 0, sizeof(unsigned long long), stream);
  round_f16_pair_check_kernel<<<4096, 256, 0, stream>>>(count.as<unsigned long long>());
  check_kernel("round_f16_pair check");
  unsigned long long host = 0;
  copy_d2h(&host, count.get(), sizeof host, stream);
  stream_sync(stream);
  return host;
}

}  // namespace tdiff::hip
