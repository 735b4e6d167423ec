#pragma once
// The emu model of the candidate's GEMM kernels:
//   y[n, o] = Σ_k x[n,k] · w[o,k]
// Operands are rounded to the input format (fp8: power-of-two 128x128 block scales for the
// weights, per-row 1x128 group scales for the activations, as DeepSeek's FP8 GEMMs; fp16:
// subnormals flushed, as gfx90a's fp16 MFMA does), the sum runs over K in blocks of kKBlock
// (one tile step) in the accumulator format; with float32 operands and accumulator (an SGEMM)
// each step is a fused multiply-add, as GPU SGEMM kernels do. Fixed reduction: the blocks are added in index
// order and the sum rounded once to the output format. Atomic reduction (split-K): K is cut
// into kSplits equal ranges of whole kKStep-element MFMA steps, each range's partial is
// rounded to the output format and atomically added into the output, in an order that
// depends on the run seed.
#include <cstdint>
#include <vector>

#include "emu/numerics.h"

namespace tdiff::emu {

inline constexpr std::int64_t kKBlock = 32;
inline constexpr std::int64_t kKStep = 8;  // k depth of one MFMA instruction (fp16/bf16 32x32x8)
inline constexpr std::int64_t kSplits = 4;

struct GemmSpec {
  Fmt in = Fmt::bf16;
  Fmt acc = Fmt::f32;
  Fmt out = Fmt::bf16;
  bool atomic = false;
  std::uint64_t seed = 0;  // run and stage identity for atomic orders
};

// Rounds a weight matrix [rows, cols] to the input format (block-scaled for fp8).
std::vector<float> quantize_weight(const double* w, std::int64_t rows, std::int64_t cols, Fmt in);
// Rounds activations [rows, cols] in place to the input format (1x128 groups for fp8).
void quantize_activations(std::vector<float>& x, std::int64_t rows, std::int64_t cols, Fmt in);
// x [N, K] and w [O, K] already quantized; y [N, O] rounded to spec.out.
void gemm(const float* x, std::int64_t N, std::int64_t K, const float* w, std::int64_t O, const GemmSpec& spec,
          float* y);

// Row-parallel: rank r of `ranks` multiplies its contiguous K range [r K/ranks, (r+1) K/ranks)
// of x [N, K] and w [O, K] (each rank's GEMM starts its blocks at its own K = 0, its atomics
// from its own seed) and stores its partial [N, O] in spec.out.
std::vector<std::vector<float>> gemm_rank_partials(const float* x, std::int64_t N, std::int64_t K, const float* w,
                                                   std::int64_t O, const GemmSpec& spec, int ranks);
// Columns [c0, c0 + width) of a row-major [rows, cols] matrix.
std::vector<float> column_slice(const float* m, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t width);

}  // namespace tdiff::emu
