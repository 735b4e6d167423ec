// The matrix-core GEMM kernels (gemm.h: 16-bit operands, float accumulator, fixed reduction):
// a BM x 128 output tile per workgroup (BM = 128, or 32 for short products and the routed
// experts' gathered rows), split between its wavefronts as 2 x (waves/2) sub-tiles of 16x16
// matrix-core tiles, each accumulating over the whole K in 16-deep matrix products.
// (Keeping emu's 32-deep block partials cost a zeroing and an add per accumulator and block:
// with them the wavefronts issued more bookkeeping than matrix products.)
// The register-staged kernel stages 64 k per LDS step, the next 64 fetched into registers
// meanwhile; float32 operands are converted to 16-bit patterns on their way to LDS (exactly:
// they are already rounded to the format), 16-bit patterns copied as they are, release codes
// decoded (weight_codes.h); four at a time where rows are 16-byte aligned. The pipelined
// kernel copies 16-bit patterns into LDS asynchronously, several blocks ahead.
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/gemm_common.h"

#include <type_traits>

#include "hip/weight_codes.h"

namespace tdiff::hip::gemm_detail {

namespace {

constexpr int kMmaBN = 128;
constexpr int kMmaStage = 2 * kKTile;  // k per LDS stage: two of emu's blocks between barriers
constexpr int kMmaLd = kMmaStage + 8;  // LDS row stride in 16-bit elements (a multiple of 8)
constexpr int kWaves = kThreads / kWaveSize;
constexpr int kWavesN = kWaves / 2;

// The register-staged kernel's weight types besides float and 16-bit patterns: the release's
// codes, decoded while staged (weight_codes.h).
template <class W>
constexpr bool kQuant = std::is_same_v<W, Fp8Codes> || std::is_same_v<W, Fp4Codes>;

// What the register-staged kernel reads. X: float (float32 values holding 16-bit values) or
// std::uint16_t (their patterns); W also Fp8Codes / Fp4Codes (a release weight).
template <class X, class W>
struct MmaArgs {
  const X* x;
  std::conditional_t<kQuant<W>, W, const W*> w;
  float* y;
  GemmLayout l;
  bool vec4;  // float4_rows
};

// What the pipelined kernel reads: both operands as 16-bit patterns.
struct PipeArgs {
  const std::uint16_t* x;
  const std::uint16_t* w;
  float* y;
  GemmLayout l;
};

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

// One 16-deep matrix product at k offset ks of the LDS tiles (rows of kLd elements) into a
// wavefront's kTilesM x kTilesN accumulators; (wm, wn) the wavefront's sub-tile.
template <bool kBf16, int kTilesM, int kTilesN, int kLd>
__device__ inline void mma_step(mma::Acc (&total)[kTilesM][kTilesN], const std::uint16_t* xs, const std::uint16_t* ws,
                                int wm, int wn, int ks) {
  mma::ATile<kBf16> at[kTilesM];
  mma::BTile<kBf16> bt[kTilesN];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) mma::load_a<kBf16>(at[i], xs + (wm * kTilesM + i) * 16 * kLd + ks, kLd);
#pragma unroll
  for (int j = 0; j < kTilesN; ++j) mma::load_b<kBf16>(bt[j], ws + (wn * kTilesN + j) * 16 * kLd + ks, kLd);
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) mma::mma<kBf16>(total[i][j], at[i], bt[j]);
}

template <int kTilesM, int kTilesN>
__device__ inline void zero_tiles(mma::Acc (&total)[kTilesM][kTilesN]) {
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) mma::zero(total[i][j]);
}

// The accumulators out through a per-wavefront 16x16 LDS tile t (the accumulator's lane
// layout is the vendor's), rounded to the output format, rows as the row table says.
template <int kTilesM, int kTilesN>
__device__ inline void store_tiles(const mma::Acc (&total)[kTilesM][kTilesN], float* t, const std::int64_t* y_row, int wm,
                                   int wn, std::int64_t col0, float* y, const GemmLayout& l) {
  const int lane = threadIdx.x % kWaveSize;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      mma::store(total[i][j], t, 16);
      __syncthreads();
      for (int e = lane; e < 256; e += kWaveSize) {
        const int r = (wm * kTilesM + i) * 16 + e / 16;
        const std::int64_t yr = y_row[r], o = col0 + (wn * kTilesN + j) * 16 + e % 16;
        if (yr >= 0 && o < l.O) y[yr * l.ldy + o] = arith::round_fmt(t[e], l.out);
      }
      __syncthreads();
    }
}

template <bool kBf16, int BM, typename X, typename W>
__global__ void __launch_bounds__(kThreads) gemm_mma_kernel(MmaArgs<X, W> a) {
  constexpr int kTilesM = BM / 2 / 16;
  constexpr int kTilesN = kMmaBN / kWavesN / 16;
  static_assert(kWaves >= 2 && kTilesM >= 1 && kTilesN >= 1, "two rows of wavefronts");
  // 32-byte aligned: wmma loads and stores need 256-bit aligned tile pointers (every tile
  // starts a multiple of 16 rows of 144 bytes, plus a multiple of 32 bytes, from these bases).
  __shared__ std::uint16_t xs[BM * kMmaLd] __attribute__((aligned(32)));
  __shared__ std::uint16_t ws[kMmaBN * kMmaLd] __attribute__((aligned(32)));
  __shared__ float tile_out[kWaves][16 * 16] __attribute__((aligned(32)));
  __shared__ std::int64_t x_row[BM], y_row[BM];

  const GemmLayout& l = a.l;
  const std::int64_t g = blockIdx.z;
  const GroupRows span = group_rows(l, g);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= span.count) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kMmaBN;
  const int tid = threadIdx.x, wave = tid / kWaveSize;
  const int wm = wave / kWavesN, wn = wave % kWavesN;
  fill_row_tables<BM>(l, span, row0, x_row, y_row);
  const X* x = a.x + g * l.x_stride;
  float* y = a.y + g * l.y_stride;

  mma::Acc total[kTilesM][kTilesN];
  zero_tiles(total);
  __syncthreads();
  // Four consecutive k per thread and slot, BM (x) and 128 (w) rows of 16 groups; the next
  // stage's operands are fetched into registers while this stage's products run.
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
      xv[q] = fetch4(x + (xr >= 0 ? xr : 0) * l.ldx, b0 + kq, l.K, xr >= 0, a.vec4);
    }
#pragma unroll
    for (int q = 0; q < kWSlots; ++q) {
      const int i = tid + q * kThreads, r = i / kGroups, kq = (i % kGroups) * 4;
      const std::int64_t o = col0 + r;
      if constexpr (kQuant<W>) wv[q] = fetch4_codes<kBf16>(a.w, g * a.w.group_rows + o, b0 + kq, l.K, o < l.O);
      else wv[q] = fetch4(a.w + g * l.w_stride + (o < l.O ? o : 0) * l.K, b0 + kq, l.K, o < l.O, a.vec4);
    }
  };
  fetch(0);
  for (std::int64_t b0 = 0; b0 < l.K; b0 += kMmaStage) {
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
    if (b0 + kMmaStage < l.K) fetch(b0 + kMmaStage);
#pragma unroll
    for (int ks = 0; ks < kMmaStage; ks += 16) {
      if (b0 + ks >= l.K) break;
      mma_step<kBf16, kTilesM, kTilesN, kMmaLd>(total, xs, ws, wm, wn, ks);
    }
    __syncthreads();
  }
  store_tiles(total, tile_out[wave], y_row, wm, wn, col0, y, l);
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

// A thread's 16-byte chunks of the pipelined kernel's tiles: they keep their row and column
// from block to block, so their sources (null outside the rows) and LDS offsets are worked
// out once. BM x rows and 128 w rows of KT / 8 chunks each.
template <int BM, int KT>
struct PipeChunks {
  static constexpr int kLd = pipe_ld<KT>();
  static constexpr int kChunks = KT / 8;  // 16-byte chunks per row and block
  static constexpr int kX = (BM * kChunks + kThreads - 1) / kThreads, kW = kMmaBN * kChunks / kThreads;
  static_assert(kMmaBN * kChunks % kThreads == 0, "whole weight chunks per thread");
  const std::uint16_t* x_src[kX];
  const std::uint16_t* w_src[kW];
  int x_dst[kX], w_dst[kW], x_col[kX], w_col[kW];

  __device__ PipeChunks(const std::uint16_t* x, const std::uint16_t* w, const std::int64_t* x_row, std::int64_t col0,
                        const GemmLayout& l) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int q = 0; q < kX; ++q) {
      const int i = tid + q * kThreads, r = i / kChunks, c = (i % kChunks) * 8;
      const std::int64_t xr = i < BM * kChunks ? x_row[r] : -1;
      x_src[q] = xr >= 0 ? x + xr * l.ldx + c : nullptr;
      x_dst[q] = r * kLd + c, x_col[q] = c;
    }
#pragma unroll
    for (int q = 0; q < kW; ++q) {
      const int i = tid + q * kThreads, r = i / kChunks, c = (i % kChunks) * 8;
      w_src[q] = col0 + r < l.O ? w + (col0 + r) * l.K + c : nullptr;
      w_dst[q] = BM * kLd + r * kLd + c, w_col[q] = c;
    }
  }
  // Block `block`'s copies into `stage` (zero-filled outside the rows or K; x, w: any valid
  // source address for those).
  __device__ void load(std::uint16_t* stage, std::int64_t block, std::int64_t K, const std::uint16_t* x,
                       const std::uint16_t* w) const {
    const std::int64_t k0 = block * KT;
#pragma unroll
    for (int q = 0; q < kX; ++q) {
      if (static_cast<int>(threadIdx.x) + q * kThreads >= BM * kChunks) break;
      const bool valid = x_src[q] && k0 + x_col[q] < K;
      async::copy16(stage + x_dst[q], valid ? x_src[q] + k0 : x, valid);
    }
#pragma unroll
    for (int q = 0; q < kW; ++q) {
      const bool valid = w_src[q] && k0 + w_col[q] < K;
      async::copy16(stage + w_dst[q], valid ? w_src[q] + k0 : w, valid);
    }
  }
};

template <bool kBf16, int BM, int KT>
__global__ void TDIFF_LAUNCH_BOUNDS(kThreads, (pipe_per_sm<BM, KT>())) gemm_mma_pipe_kernel(PipeArgs a) {
  constexpr int kPipeLd = pipe_ld<KT>();
  constexpr int kTilesM = BM / 2 / 16;
  constexpr int kTilesN = kMmaBN / kWavesN / 16;
  constexpr int kStage = (BM + kMmaBN) * kPipeLd;  // elements per stage: x rows, then w rows
  static_assert(kWaves >= 2 && kTilesM >= 1 && kTilesN >= 1, "two rows of wavefronts");
  static_assert(kPipeStages >= 2, "a stage read while the next is written");
  static_assert(kWaves * 16 * 16 * sizeof(float) <= kStage * 2, "the output tiles fit in stage 0");
  // Stage s at lds + s * kStage (every stage a multiple of 32 bytes: wmma's tile alignment);
  // the row tables after the stages.
  extern __shared__ __attribute__((aligned(128))) std::uint16_t lds[];
  auto* x_row = reinterpret_cast<std::int64_t*>(lds + kPipeStages * kStage);
  std::int64_t* y_row = x_row + BM;

  const GemmLayout& l = a.l;
  const std::int64_t g = blockIdx.z;
  const GroupRows span = group_rows(l, g);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  if (row0 >= span.count) return;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kMmaBN;
  const int wave = threadIdx.x / kWaveSize;
  const int wm = wave / kWavesN, wn = wave % kWavesN;
  fill_row_tables<BM>(l, span, row0, x_row, y_row);
  __syncthreads();
  const std::uint16_t* x = a.x + g * l.x_stride;
  const std::uint16_t* w = a.w + g * l.w_stride;
  float* y = a.y + g * l.y_stride;
  const PipeChunks<BM, KT> chunks(x, w, x_row, col0, l);
  auto load_block = [&](std::int64_t block) { chunks.load(lds + (block % kPipeStages) * kStage, block, l.K, x, w); };

  mma::Acc total[kTilesM][kTilesN];
  zero_tiles(total);
  const std::int64_t blocks = (l.K + KT - 1) / KT;
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
    for (int ks = 0; ks < KT; ks += 16) mma_step<kBf16, kTilesM, kTilesN, kPipeLd>(total, xs, ws, wm, wn, ks);
  }
  async::wait<0>();
  __syncthreads();  // the stages are free: stage 0 holds the per-wavefront output tiles
  store_tiles(total, reinterpret_cast<float*>(lds) + wave * 16 * 16, y_row, wm, wn, col0, y, l);
}

// Whether the pipelined kernel applies: copies that overlap the products (NVIDIA), 16-bit
// patterns on both sides, every row and group in whole 16-byte chunks.
bool pipe_rows(const GemmLayout& l, const std::uint16_t* x, const std::uint16_t* w) {
  return async::kOverlaps && x && w && l.ldx % 8 == 0 && l.K % 8 == 0 && l.x_stride % 8 == 0 && l.w_stride % 8 == 0 &&
         aligned16(x) && aligned16(w);
}

template <bool kBf16, int BM, int KT>
void launch_pipe(const PipeArgs& a, std::int64_t groups, hipStream_t stream) {
  constexpr std::size_t lds = pipe_lds_bytes<BM, KT>();
  const auto kernel = gemm_mma_pipe_kernel<kBf16, BM, KT>;
  static const bool opted_in = [&] {  // once per kernel and process
    return lds <= 48 * 1024 || hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                   hipFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(lds)) == hipSuccess;
  }();
  if (!opted_in) check_kernel("gemm: LDS opt-in");
  const dim3 grid(blocks_for(a.l.O, kMmaBN), blocks_for(a.l.M, BM), static_cast<unsigned>(groups));
  kernel<<<grid, kThreads, lds, stream>>>(a);
}

// bench_gemm (H200): 128 x 32-deep for tall products; 32-row tiles (the routed experts' few
// dozen rows per expert, short products) stream the weight, which 64-deep stages read in
// whole 128-byte runs per row: 3.4 instead of 2.2 TB/s on the experts.
template <bool kBf16>
void launch_pipe_shape(const PipeArgs& a, std::int64_t groups, bool tall, int tile_rows, int tile_k, hipStream_t stream) {
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
}

template <bool kBf16, int BM, class X, class W>
void launch_mma_kernel(const MmaArgs<X, W>& a, std::int64_t groups, hipStream_t stream) {
  const dim3 grid(blocks_for(a.l.O, kMmaBN), blocks_for(a.l.M, BM), static_cast<unsigned>(groups));
  gemm_mma_kernel<kBf16, BM, X, W><<<grid, kThreads, 0, stream>>>(a);
}

// The register-staged kernel for activations of type X and each kind of weight: a release
// weight's codes (four per word where K % 4 == 0 and the codes are 4-byte aligned), 16-bit
// patterns or float32 values.
template <bool kBf16, int BM, class X>
void launch_mma_tile(const X* x, const GemmWeight& w, float* y, const GemmLayout& l, std::int64_t groups,
                     hipStream_t stream) {
  const QuantWeight& q = w.quant;
  const bool vec4 = float4_rows(l, x, q.codes ? nullptr : w.bits16 ? static_cast<const void*>(w.bits16) : w.f32);
  if (q.codes) {
    const std::int64_t group_rows = l.w_stride / l.K;
    const bool codes_vec4 = l.K % 4 == 0 && reinterpret_cast<std::uintptr_t>(q.codes) % 4 == 0;
    if (q.format == QuantWeight::Format::fp8)
      launch_mma_kernel<kBf16, BM>(
          MmaArgs<X, Fp8Codes>{x, {q.codes, q.block_scale, (l.K + 127) / 128, group_rows, codes_vec4}, y, l, vec4}, groups,
          stream);
    else
      launch_mma_kernel<kBf16, BM>(
          MmaArgs<X, Fp4Codes>{x, {q.codes, q.e8m0, (l.K + 31) / 32, group_rows, codes_vec4}, y, l, vec4}, groups, stream);
  } else if (w.bits16) {
    launch_mma_kernel<kBf16, BM>(MmaArgs<X, std::uint16_t>{x, w.bits16, y, l, vec4}, groups, stream);
  } else {
    launch_mma_kernel<kBf16, BM>(MmaArgs<X, float>{x, w.f32, y, l, vec4}, groups, stream);
  }
}

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
void launch_mma(GemmInput x, const GemmWeight& w, float* y, const GemmLayout& l, const GemmGroups& groups,
                hipStream_t stream) {
  // 128-row tiles when they give every SM a workgroup; a product with few output columns
  // (q_a, kv, the router, the shared expert's gate and up: 1024 x 4096 -> 1024 / 512 / 256 /
  // 2048) takes 32-row tiles instead, four times the workgroups (the same products in the
  // same order: the same bits). At twice the SMs as the bar, o_b (256 workgroups of 128 rows)
  // lost a third on 32-row tiles on the H200.
  bool tall = !l.rows && l.M >= 96 &&
              static_cast<std::int64_t>(blocks_for(l.O, kMmaBN)) * blocks_for(l.M, 128) * groups.count >= device_sms();
  if (pipe_rows(l, x.bits16, w.bits16)) {
    launch_pipe_shape<kBf16>(PipeArgs{x.bits16, w.bits16, y, l}, groups.count, tall, groups.tile_rows, groups.tile_k,
                             stream);
    return;
  }
  // The register-staged kernel has 32- and 128-row tiles: a caller's 64 takes 128.
  if (groups.tile_rows) tall = groups.tile_rows >= 64;
  if (x.bits16) {
    if (tall) launch_mma_tile<kBf16, 128>(x.bits16, w, y, l, groups.count, stream);
    else launch_mma_tile<kBf16, 32>(x.bits16, w, y, l, groups.count, stream);
  } else {
    if (tall) launch_mma_tile<kBf16, 128>(x.f32, w, y, l, groups.count, stream);
    else launch_mma_tile<kBf16, 32>(x.f32, w, y, l, groups.count, stream);
  }
}

}  // namespace

void launch_matrix_cores(GemmInput x, const GemmWeight& w, float* y, const GemmLayout& l, bool bf16,
                         const GemmGroups& groups, hipStream_t stream) {
  if (bf16) launch_mma<true>(x, w, y, l, groups, stream);
  else launch_mma<false>(x, w, y, l, groups, stream);
}

}  // namespace tdiff::hip::gemm_detail
