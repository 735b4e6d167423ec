#pragma once
// GEMM kernels, emu/gemm.h on the GPU:  y[m, o] = Σ_k x[m, k] · w[o, k]
//   x [M, K] (row stride ldx), w [O, K] (row-major), y [M, O] (row stride ldy), all float32
//   holding already-quantized operands (quantize_* below). The sum runs over K in blocks of
//   32 (one LDS tile step; emu::kKBlock), products summed sequentially inside a block in the
//   accumulator format (fused multiply-adds in an SGEMM: float32 operands and accumulator),
//   block partials added in order (the vector-ALU kernel; the matrix-core kernels below differ).
//   Fixed reduction: y = round_out(total).
//   Atomic reduction (split-K): K cut into 4 ranges of whole 8-deep MFMA steps, each range's
//   partial rounded to `out` and atomically added (CAS, rounded to `out` per add) into y,
//   which the launcher zeroes first (unless told the caller did); the order is whatever order the workgroups arrive in.
// Vector-ALU kernel: tiles of 128x128 (32x128 for short products) per workgroup, 8x8 (2x8)
// per thread, x and w tiles staged through LDS. Matrix-core kernels (spec.matrix_cores, for
// bf16/fp16 operands, float accumulator, fixed reduction): one float accumulator per output
// runs over the whole K in 16-deep matrix products, as a real port's MFMA / tensor-core
// chains do, in a fixed order (so runs repeat bit for bit); the hardware's summation order
// inside a 16-deep product and the absence of emu's 32-deep block partials make the result
// differ from emu's by float roundings of Σ|x·w|, at most about 2(K/16 + 2) float ulps of it
// (the tests' bound), and then by one ulp of the output format where the sum lies next to a
// rounding boundary. With both operands as 16-bit patterns
// and every row a whole number of 16-byte chunks, the pipelined kernel copies them into LDS
// asynchronously, several blocks ahead; its bits equal the register-staged kernel's.
// Grouped form (blockIdx.z = group g): x/w/y offset by g·{x,w,y}_stride elements; with a
// row list, group g covers list[starts[g] .. starts[g+1]) and its row i reads x row
// list[..+i] / a_div and writes y row list[..+i] (the routed experts: tokens gathered per
// expert). All pointers are device pointers; launch errors throw std::runtime_error.
#include <cstdint>
#include <string>

#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

struct GemmSpec {
  arith::Fmt in = arith::Fmt::bf16;   // operand format (operands are already rounded to it)
  arith::Fmt acc = arith::Fmt::f32;   // accumulator
  arith::Fmt out = arith::Fmt::bf16;  // stored result
  bool atomic = false;                // split-K with real atomics
  // 16-bit operands with a float accumulator and fixed reduction run on the matrix cores
  // (MFMA / tensor cores) when true; false keeps the vector-ALU kernel, bit-identical to emu.
  bool matrix_cores = false;
};

// Whether the device has the matrix instructions the matrix-core path uses (gfx90a, gfx908,
// gfx94x; every NVIDIA architecture this project builds for).
bool has_matrix_cores(const std::string& arch);

struct GemmGroups {
  std::int64_t count = 1;
  std::int64_t x_stride = 0, w_stride = 0, y_stride = 0;  // element offsets per group
  const std::int32_t* d_rows = nullptr;    // row list (null: rows 0..M-1 in every group)
  const std::int32_t* d_starts = nullptr;  // [count + 1] offsets into the row list
  std::int32_t a_div = 1;                  // x row = list entry / a_div
  std::int64_t y_rows = 0;                 // atomic mode zeroes y_rows x ldy from y (0: M rows per group)
  bool zero_output = true;                 // false: the caller zeroed y (atomic mode)
  // Rows per workgroup tile of the pipelined matrix-core kernel (32, 64 or 128) and k per LDS
  // stage (32 or 64); 0 chooses from the shape (bench_gemm compares them).
  int tile_rows = 0, tile_k = 0;
};

// Whether gemm() runs `spec` on the matrix cores (16-bit operands, float accumulator, fixed
// reduction, spec.matrix_cores): only then may the weight be given as 16-bit patterns.
bool runs_on_matrix_cores(const GemmSpec& spec);

// A weight as the release stores it (formats/release_format.h), decoded by the matrix-core
// kernels while they stage it (emu/release_codes.h: the float32 value of code x scale, then
// rounded as an operand of spec.in): the products see exactly the operands of the weight
// dequantised first (tested bit for bit), from a quarter (FP8) or an eighth (FP4) of the
// bytes of float32. Rows of every group stacked: group g's row o is row g * (w_stride / K) + o.
struct QuantWeight {
  enum class Format : std::uint8_t { fp8, fp4 };
  Format format = Format::fp8;
  const std::uint8_t* codes = nullptr;  // fp8: e4m3 [rows, K]; fp4: e2m1 pairs [rows, ceil(K/2)], low nibble the even column
  const float* block_scale = nullptr;   // fp8: [ceil(rows/128), ceil(K/128)], the scales' float values
  const std::uint8_t* e8m0 = nullptr;   // fp4: [rows, ceil(K/32)], E8M0 bytes
};

// A weight on the device: float32 values already rounded to spec.in, or (matrix-core path
// only) their bf16/fp16 bit patterns, which that kernel reads as they are: half the device
// memory and half the bytes each GEMM reads; or (matrix-core path only) as the release
// stores it.
struct GemmWeight {
  const float* f32 = nullptr;
  const std::uint16_t* bits16 = nullptr;
  QuantWeight quant;
  GemmWeight(const float* w) : f32(w) {}  // NOLINT(google-explicit-constructor): the common case
  explicit GemmWeight(const std::uint16_t* w) : bits16(w) {}
  explicit GemmWeight(const QuantWeight& w) : quant(w) {}
};

// The activations on the device: float32 values already rounded to spec.in, or (matrix-core
// path only) their bf16/fp16 bit patterns (quantize_activations_bits16), which let the
// pipelined matrix-core kernel copy both operands into LDS as they are.
struct GemmInput {
  const float* f32 = nullptr;
  const std::uint16_t* bits16 = nullptr;
  GemmInput(const float* x) : f32(x) {}  // NOLINT(google-explicit-constructor): the common case
  explicit GemmInput(const std::uint16_t* x) : bits16(x) {}
  // The rows from r0 on, of a row stride ld.
  GemmInput rows_from(std::int64_t r0, std::int64_t ld) const {
    return f32 ? GemmInput(f32 + r0 * ld) : GemmInput(bits16 + r0 * ld);
  }
  // The columns from c0 on (the row stride stays the caller's): a rank's K range.
  GemmInput cols_from(std::int64_t c0) const { return f32 ? GemmInput(f32 + c0) : GemmInput(bits16 + c0); }
};

// M is the row count (with a row list: the largest group's size bound).
void gemm(GemmInput x, std::int64_t ldx, GemmWeight w, float* d_y, std::int64_t ldy, std::int64_t M,
          std::int64_t K, std::int64_t O, const GemmSpec& spec, hipStream_t stream, const GemmGroups& groups = {});

// dst = the bf16/fp16 bit patterns of src rounded as an MMA operand of `in` (bf16 or f16):
// quantize_activations and pack_bits16 in one pass.
void quantize_activations_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, arith::Fmt in,
                                 hipStream_t stream);

// Sets *d_flag (a device int the caller zeroed) to 1 when some v[i] is not exactly an MMA
// operand of `in` (bf16 or f16), i.e. changes when rounded as one.
void mark_inexact_operands(const float* d_v, std::int64_t n, arith::Fmt in, int* d_flag, hipStream_t stream);

// dst[i] = the float value of the bf16 or fp16 bit pattern src[i] (exact; pack_bits16 undone).
void widen_bits16(const std::uint16_t* d_src, float* d_dst, std::int64_t n, arith::Fmt in, hipStream_t stream);

// dst [rows, K] = the float32 values of a release weight (every group's rows), the
// dequantisation the GEMM kernels do while staging, without the operand rounding (exact).
void dequantize_weight(const QuantWeight& w, std::int64_t rows, std::int64_t K, float* d_dst, hipStream_t stream);

// dst [rows, K] = the bf16 or fp16 bit patterns of a release weight's values rounded as MMA
// operands of `in`: dequantize_weight, quantize_weight and pack_bits16 in one pass, so the
// pipelined kernel reads the operands the in-kernel decode would stage (a model decoded once).
void decode_weight_bits16(const QuantWeight& w, std::int64_t rows, std::int64_t K, arith::Fmt in, std::uint16_t* d_dst,
                          hipStream_t stream);

// Sets *d_flag (a device int the caller zeroed) to 1 when an FP8 release weight holds a NaN
// code (e4m3 0x7F / 0xFF; E2M1 has none, and scales are checked on the host).
void mark_nan_codes(const QuantWeight& w, std::int64_t rows, std::int64_t K, int* d_flag, hipStream_t stream);

// dst[i] = the bf16 or fp16 bit pattern of src[i] (already rounded to `in`; exact).
void pack_bits16(const float* d_src, std::uint16_t* d_dst, std::int64_t n, arith::Fmt in, hipStream_t stream);

// dst = src rounded as an MMA operand of `in` (fp16: subnormals flushed). fp8: 1x128 groups
// along each row (restarting every `segment` columns; 0 = cols), dynamic float scale
// amax/448, v = round_f8(v/s)·s. dst may equal src.
void quantize_activations(const float* d_src, float* d_dst, std::int64_t rows, std::int64_t cols, std::int64_t segment,
                          arith::Fmt in, hipStream_t stream);
// In place: a weight [rows, cols] as an operand of `in`; fp8: 128x128 blocks with power-of-two
// scales 2^ceil(log2(amax/448)).
void quantize_weight(float* d_w, std::int64_t rows, std::int64_t cols, arith::Fmt in, hipStream_t stream);

// The float bit patterns, of all 2^32, on which arith::round_f16_pair on this device differs
// from arith::round_f16 in bits (the GEMM's fp16 accumulator uses the pair; tests: 0).
std::uint64_t round_f16_pair_mismatches(hipStream_t stream);

}  // namespace tdiff::hip
