#pragma once
// What the GEMM kernel files share (included by .hip sources only): the problem's layout as
// every kernel reads it, the prologue every kernel runs (which rows its tile covers, the K
// range of a split, operand loads four k at a time) and the launchers gemm() dispatches to.
//   gemm.hip               gemm(): checks, the kernel choice
//   gemm_vector_alu.hip    the vector-ALU kernel (emu's order, every format, split-K)
//   gemm_matrix_cores.hip  the matrix-core kernels (register-staged and pipelined)
//   weight_codes.h/.hip    a release weight's FP8/FP4 codes decoded (in the kernels and alone)
//   gemm_operands.hip      operand conversion: rounding, 16-bit patterns, fp8 scaling
#include <algorithm>
#include <cstdint>

#include "hip/gemm.h"
#include "hip/kernel_common.h"

namespace tdiff::hip::gemm_detail {

inline constexpr int kKTile = 32;           // emu::kKBlock
inline constexpr int kThreads = 256;
inline constexpr std::int64_t kSplits = 4;  // emu::kSplits
inline constexpr std::int64_t kKStep = 8;   // emu::kKStep

// What every GEMM kernel reads besides its operands: sizes, row and group strides, the row
// grouping (gemm.h's grouped form) and the stored format.
struct GemmLayout {
  std::int64_t ldx, ldy, M, K, O;
  std::int64_t x_stride, w_stride, y_stride;  // element offsets per group
  const std::int32_t* rows;                   // row list, or null
  const std::int32_t* starts;                 // [groups + 1] offsets into it
  std::int32_t a_div;                         // x row = list entry / a_div
  Fmt out;
};

// Rows first .. first + count of group g: a span of the row list, or rows 0 .. M-1.
struct GroupRows {
  std::int64_t first, count;
};
__device__ inline GroupRows group_rows(const GemmLayout& l, std::int64_t g) {
  if (!l.rows) return {0, l.M};
  return {l.starts[g], l.starts[g + 1] - l.starts[g]};
}

// The x row and y row of each of a tile's BM rows from row0 on (-1 past the group's rows).
template <int BM>
__device__ inline void fill_row_tables(const GemmLayout& l, GroupRows span, std::int64_t row0, std::int64_t* x_row,
                                       std::int64_t* y_row) {
  for (int i = threadIdx.x; i < BM; i += kThreads) {
    const std::int64_t r = row0 + i;
    if (r < span.count) {
      if (l.rows) {
        const std::int64_t e = l.rows[span.first + r];
        x_row[i] = e / l.a_div, y_row[i] = e;
      } else {
        x_row[i] = r, y_row[i] = r;
      }
    } else {
      x_row[i] = -1, y_row[i] = -1;
    }
  }
}

// The K range [k0, k1) of split `split` (split-K: ranges of per_split k, the last ones short
// or empty).
struct KRange {
  std::int64_t k0, k1;
};
__device__ inline KRange split_range(std::int64_t K, std::int64_t per_split, std::int64_t split) {
  const std::int64_t k0 = std::min(K, split * per_split);
  return {k0, std::min(K, k0 + per_split)};
}

// Four consecutive operands of one row from global memory (zeros outside the row or K).
__device__ inline float4 fetch4(const float* src, std::int64_t k, std::int64_t K, bool valid, bool vec4) {
  if (valid && vec4 && k + 3 < K) return *reinterpret_cast<const float4*>(src + k);
  float v[4];
  for (int j = 0; j < 4; ++j) v[j] = (valid && k + j < K) ? src[k + j] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}
// Four consecutive 16-bit operand patterns (zeros outside the row or K: +0 in bf16 and fp16).
__device__ inline uint2 fetch4(const std::uint16_t* src, std::int64_t k, std::int64_t K, bool valid, bool vec4) {
  if (valid && vec4 && k + 3 < K) return *reinterpret_cast<const uint2*>(src + k);
  unsigned v[4];
  for (int j = 0; j < 4; ++j) v[j] = (valid && k + j < K) ? src[k + j] : 0u;
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether every operand row of this layout starts 16-byte aligned from these bases (x, and w
// unless null: a release weight has its own rule), so four consecutive k load as one float4
// (or four 16-bit patterns as 8 bytes).
inline bool float4_rows(const GemmLayout& l, const void* x, const void* w) {
  return l.ldx % 4 == 0 && l.K % 4 == 0 && l.x_stride % 4 == 0 && l.w_stride % 4 == 0 && aligned16(x) &&
         (!w || aligned16(w));
}

// The vector-ALU kernel for operands already rounded to their format (gemm_vector_alu.hip):
// fma as gemm.h says, acc the accumulator, atomic split-K (y zeroed by the caller).
void launch_vector_alu(const float* x, const float* w, float* y, const GemmLayout& l, Fmt acc, bool fma, bool atomic,
                       std::int64_t groups, hipStream_t stream);
// The matrix-core kernels (gemm_matrix_cores.hip): bf16 or fp16 operands, float accumulator,
// fixed reduction; groups.tile_rows / tile_k as gemm.h says.
void launch_matrix_cores(GemmInput x, const GemmWeight& w, float* y, const GemmLayout& l, bool bf16,
                         const GemmGroups& groups, hipStream_t stream);

}  // namespace tdiff::hip::gemm_detail
