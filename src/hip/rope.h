#pragma once
// RoPE kernels, emu/rope.h on the GPU.
//   rope_tables: positions [n] (int64), freq [r/2] (float32: emu::rope_frequencies, with
//     YaRN blending, computed once on the host) -> cos, sin [n, r/2]: the angle p·ω in float32,
//     then rounded per the rope_angle knob (bf16, fp16) or range-reduced with a float 2π
//     (fast), cos/sin of it rounded once to float32.
//   rope_rotate: x [rows, width] -> y: the first width−r channels copied, the trailing r
//     rotated in interleaved pairs (a, b) -> (a·c − b·s, a·s + b·c) with the table row
//     table_row(i) = (i / div) % mod, sign of s flipped for the inverse; stored in `out`.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void rope_tables(const std::int64_t* d_positions, std::int64_t n, const float* d_freq, std::int64_t half,
                 RopeAngle angle, float* d_cos, float* d_sin, hipStream_t stream);
void rope_rotate(const float* d_x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* d_cos,
                 const float* d_sin, std::int64_t div, std::int64_t mod, bool inverse, arith::Fmt out, float* d_y,
                 hipStream_t stream);

}  // namespace tdiff::hip
