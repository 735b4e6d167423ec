// The vector-ALU GEMM kernel (gemm.h): emu's summation order bit for bit, every operand and
// accumulator format, fixed or split-K reduction.
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/gemm_common.h"

#include <stdexcept>

namespace tdiff::hip::gemm_detail {

namespace {

// What the vector-ALU kernel reads: float32 operands already rounded to their format.
struct VectorAluArgs {
  const float* x;
  const float* w;
  float* y;
  GemmLayout l;
  std::int64_t per_split;  // split-K: the K range of one split
  bool vec4;               // float4_rows
};

// LDS column of row/column c in k-row kk of the vector-ALU kernel's tiles: runs of 4 XOR-ed
// with the 4-deep k group, so that the transposing stores of a wavefront (8 k groups x 4
// rows) fall into 32 different banks while every run of 4 stays one aligned float4.
__device__ inline int swizzle(int kk, int c) { return c ^ (((kk >> 2) & 7) << 2); }

// Staging: slot q of a thread is row (tid + q·256) / 8 of the tile and its k group
// ((tid + q·256) % 8) · 4; a wavefront reads whole 128-byte row segments.
inline constexpr int kGroups = kKTile / 4;

// A thread's slots of one operand tile, four consecutive k from b0 on each, into registers.
// `row_of_slot(r)`: the source row of tile row r, or null outside the operand.
template <int kSlots, class RowOf>
__device__ inline void fetch_slots(float4 (&v)[kSlots], RowOf row_of_slot, std::int64_t b0, std::int64_t k1, bool vec4) {
#pragma unroll
  for (int q = 0; q < kSlots; ++q) {
    const int i = threadIdx.x + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
    const float* src = row_of_slot(r);
    v[q] = fetch4(src, b0 + kq, k1, src != nullptr, vec4);
  }
}

// The registers of fetch_slots into a k-major LDS tile of BN columns (transposed, swizzled).
template <int BN, int kSlots>
__device__ inline void store_slots(float (*tile)[BN], const float4 (&v)[kSlots]) {
#pragma unroll
  for (int q = 0; q < kSlots; ++q) {
    const int i = threadIdx.x + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
    tile[kq][swizzle(kq, r)] = v[q].x, tile[kq + 1][swizzle(kq + 1, r)] = v[q].y;
    tile[kq + 2][swizzle(kq + 2, r)] = v[q].z, tile[kq + 3][swizzle(kq + 3, r)] = v[q].w;
  }
}

// emu: the products of one 32-deep block summed in order into a fresh partial, in the
// accumulator format kAcc (see gemm_kernel), from the LDS tiles.
template <int BM, int BN, int TM, int TN, bool kFma, Fmt kAcc, class RowOf, class ColOf>
__device__ inline void block_partial(float (&part)[TM][TN], const float (*xs)[BM], const float (*ws)[BN], RowOf row_of,
                                     ColOf col_of) {
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
}

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
__global__ void __launch_bounds__(kThreads) gemm_kernel(VectorAluArgs a) {
  static_assert((BM / TM) * (BN / TN) == kThreads && TN % 4 == 0, "one output block per thread");
  static_assert(BM >= 32 && BN >= 32 && (TM % 4 == 0 || TM < 4), "the swizzle stays inside a tile row");
  __shared__ float xs[kKTile][BM] __attribute__((aligned(16)));
  __shared__ float ws[kKTile][BN] __attribute__((aligned(16)));
  __shared__ std::int64_t x_row[BM], y_row[BM];

  const GemmLayout& l = a.l;
  const std::int64_t g = kAtomic ? blockIdx.z / kSplits : blockIdx.z;
  const GroupRows span = group_rows(l, g);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= span.count) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;
  const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);
  fill_row_tables<BM>(l, span, row0, x_row, y_row);
  const float* x = a.x + g * l.x_stride;
  const float* w = a.w + g * l.w_stride;
  float* y = a.y + g * l.y_stride;
  const KRange kr = kAtomic ? split_range(l.K, a.per_split, blockIdx.z % kSplits) : KRange{0, l.K};

  // A thread's rows and columns: runs of 4 spread over the tile (float4 reads, no LDS bank
  // conflicts between neighbouring threads), or TM consecutive rows when TM < 4.
  auto row_of = [&](int i) { return TM % 4 == 0 ? (i / 4) * (BM * 4 / TM) + ty * 4 + i % 4 : ty * TM + i; };
  auto col_of = [&](int j) { return (j / 4) * (BN * 4 / TN) + tx * 4 + j % 4; };
  constexpr int kXSlots = BM * kGroups / kThreads, kWSlots = BN * kGroups / kThreads;
  static_assert(BM * kGroups % kThreads == 0 && BN * kGroups % kThreads == 0, "whole slots");
  float4 xv4[kXSlots], wv4[kWSlots];
  __syncthreads();
  auto x_src = [&](int r) -> const float* { return x_row[r] >= 0 ? x + x_row[r] * l.ldx : nullptr; };
  auto w_src = [&](int r) -> const float* { return col0 + r < l.O ? w + (col0 + r) * l.K : nullptr; };
  auto fetch = [&](std::int64_t b0) {
    fetch_slots(xv4, x_src, b0, kr.k1, a.vec4);
    fetch_slots(wv4, w_src, b0, kr.k1, a.vec4);
  };
  float total[TM][TN] = {};
  if (kr.k0 < kr.k1) fetch(kr.k0);
  for (std::int64_t b0 = kr.k0; b0 < kr.k1; b0 += kKTile) {
    store_slots<BM>(xs, xv4);
    store_slots<BN>(ws, wv4);
    __syncthreads();
    if (b0 + kKTile < kr.k1) fetch(b0 + kKTile);
    float part[TM][TN] = {};
    block_partial<BM, BN, TM, TN, kFma, kAcc>(part, xs, ws, row_of, col_of);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        total[i][j] = kAcc == Fmt::f32 ? total[i][j] + part[i][j] : arith::add_fmt(total[i][j], part[i][j], kAcc);
    __syncthreads();
  }
  if (kAtomic && kr.k0 >= kr.k1) return;  // an empty split adds nothing
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t yr = y_row[row_of(i)];
    if (yr < 0) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const std::int64_t o = col0 + col_of(j);
      if (o >= l.O) continue;
      const float v = arith::round_fmt(total[i][j], l.out);
      if (kAtomic) atomic_add_fmt(&y[yr * l.ldy + o], v, l.out);
      else y[yr * l.ldy + o] = v;
    }
  }
}

// Tile shapes: 128x128 for large products, 32x128 for short ones (the routed experts see a
// few dozen rows per expert).
template <int BM, int BN, int TM, int TN, bool kFma, Fmt kAcc>
void launch_tile(const VectorAluArgs& a, std::int64_t groups, bool atomic, hipStream_t stream) {
  const dim3 grid(blocks_for(a.l.O, BN), blocks_for(a.l.M, BM), static_cast<unsigned>(groups * (atomic ? kSplits : 1)));
  if (atomic) gemm_kernel<BM, BN, TM, TN, kFma, kAcc, true><<<grid, kThreads, 0, stream>>>(a);
  else gemm_kernel<BM, BN, TM, TN, kFma, kAcc, false><<<grid, kThreads, 0, stream>>>(a);
}
template <bool kFma, Fmt kAcc>
void launch_shape(const VectorAluArgs& a, std::int64_t groups, bool atomic, hipStream_t stream) {
  if (a.l.M >= 96) launch_tile<128, 128, 8, 8, kFma, kAcc>(a, groups, atomic, stream);
  else launch_tile<32, 128, 2, 8, kFma, kAcc>(a, groups, atomic, stream);
}
template <bool kFma>
void launch_format(const VectorAluArgs& a, Fmt acc, std::int64_t groups, bool atomic, hipStream_t stream) {
  switch (acc) {
    case Fmt::f32: launch_shape<kFma, Fmt::f32>(a, groups, atomic, stream); break;
    case Fmt::bf16: launch_shape<kFma, Fmt::bf16>(a, groups, atomic, stream); break;
    case Fmt::f16: launch_shape<kFma, Fmt::f16>(a, groups, atomic, stream); break;
    default: throw std::runtime_error("gemm: no accumulator of this format");
  }
}

}  // namespace

void launch_vector_alu(const float* x, const float* w, float* y, const GemmLayout& l, Fmt acc, bool fma, bool atomic,
                       std::int64_t groups, hipStream_t stream) {
  VectorAluArgs a{x, w, y, l, 0, float4_rows(l, x, w)};
  if (atomic) a.per_split = (l.K + kSplits * kKStep - 1) / (kSplits * kKStep) * kKStep;
  if (fma) launch_format<true>(a, acc, groups, atomic, stream);
  else launch_format<false>(a, acc, groups, atomic, stream);
}

}  // namespace tdiff::hip::gemm_detail
