// gemm() (gemm.h): the checks, the split-K output zeroing and the kernel choice; the kernels
// are in gemm_vector_alu.hip and gemm_matrix_cores.hip (the file map: gemm_common.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/gemm.h"

#include <stdexcept>

#include "hip/gemm_common.h"

namespace tdiff::hip {

using gemm_detail::GemmLayout;

bool has_matrix_cores(const std::string& arch) { return vendor::has_matrix_cores(arch); }

bool runs_on_matrix_cores(const GemmSpec& spec) {
  // Products of two 16-bit operands are exact in float, so the matrix cores' float sums of
  // them are the only difference from emu.
  return (spec.in == Fmt::bf16 || spec.in == Fmt::f16) && spec.acc == Fmt::f32 && spec.matrix_cores && !spec.atomic;
}

namespace {

void check_gemm_args(GemmInput x, const GemmWeight& w, std::int64_t K, bool mma, const GemmGroups& groups) {
  if (groups.tile_rows != 0 && groups.tile_rows != 32 && groups.tile_rows != 64 && groups.tile_rows != 128)
    throw std::logic_error("gemm: tile_rows must be 0, 32, 64 or 128");
  if (groups.tile_k != 0 && groups.tile_k != 32 && groups.tile_k != 64)
    throw std::logic_error("gemm: tile_k must be 0, 32 or 64");
  if ((w.bits16 || x.bits16) && !mma) throw std::logic_error("gemm: 16-bit operand patterns outside the matrix-core path");
  if (w.quant.codes && !mma) throw std::logic_error("gemm: a release weight as stored outside the matrix-core path");
  if (w.quant.codes && groups.count > 1 && groups.w_stride % K != 0)
    throw std::logic_error("gemm: a release weight's groups are not whole rows");
}

}  // namespace

void gemm(GemmInput x, std::int64_t ldx, GemmWeight w, float* d_y, std::int64_t ldy, std::int64_t M,
          std::int64_t K, std::int64_t O, const GemmSpec& spec, hipStream_t stream, const GemmGroups& groups) {
  if (M <= 0 || O <= 0) return;
  const bool mma = runs_on_matrix_cores(spec);
  check_gemm_args(x, w, K, mma, groups);
  const GemmLayout layout{ldx, ldy, M, K, O, groups.x_stride, groups.w_stride, groups.y_stride, groups.d_rows,
                          groups.d_starts, groups.a_div, spec.out};
  if (spec.atomic && groups.zero_output) {
    // Zero every element the groups write: y_rows x ldy from d_y when given, else the M rows
    // of every group.
    const std::int64_t span = groups.y_rows ? groups.y_rows * ldy : (groups.count - 1) * groups.y_stride + M * ldy;
    if (hipMemsetAsync(d_y, 0, static_cast<std::size_t>(span) * sizeof(float), stream) != hipSuccess)
      check_kernel("gemm: zeroing the split-K output");
  }
  if (mma) {
    gemm_detail::launch_matrix_cores(x, w, d_y, layout, spec.in == Fmt::bf16, groups, stream);
  } else {
    // FMA for 16-bit operands (exact products) or an SGEMM; fp8 activations carry a float
    // scale (amax/448), so their products are not exact and take the rounded-product path.
    const bool fma = spec.in == Fmt::bf16 || spec.in == Fmt::f16 || (spec.in == Fmt::f32 && spec.acc == Fmt::f32);
    gemm_detail::launch_vector_alu(x.f32, w.f32, d_y, layout, spec.acc, fma, spec.atomic, groups.count, stream);
  }
  check_kernel("gemm");
}

}  // namespace tdiff::hip
