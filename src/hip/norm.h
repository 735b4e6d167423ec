#pragma once
// RMSNorm kernels, emu/norm.h on the GPU:  y[r, :] = round_out(g ⊙ (x[r, :] · f_r)),
//   f_r = round_s(1 / sqrt(round_s(Σ x² / n) + ε)), with the sum of squares as emu's 64-lane
//   model: lane j accumulates x[j], x[j+64], ... in the statistics format s, then a tree
//   (32, 16, ..., 1) in s. x [rows, n]; g [n] (null: the per-head norm without weight).
// One workgroup of emu::kLanes threads per row (the lane count is emu's model of a CDNA
// wavefront, not the hardware's width: the tree runs through LDS, so NVIDIA gets the same bits).
#include <cstdint>

#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void rms_norm(const float* d_x, std::int64_t rows, std::int64_t n, const float* d_g, float eps, arith::Fmt stats,
              arith::Fmt out, float* d_y, hipStream_t stream);

}  // namespace tdiff::hip
