#pragma once
// The emu model of RoPE: frequencies in float32; the angle p·ω in the policy's angle format
// (fp32, bf16, fp16) or fast-math sin/cos (a float32 range reduction with a float 2π, as
// __sinf/__cosf); cos/sin tables in float32; rotation of the trailing r channels in float32,
// result in the storage format.
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

// The RoPE knobs as the kernels take them (emu and hip): the angle's precision, and the
// rotated activations stored in storage.
struct RopeSpec {
  RopeAngle angle;
  Fmt out;
};
RopeSpec rope_spec(const Numerics& num);

std::vector<float> rope_frequencies(const RopeTable& t, std::int64_t r);
void rope_tables(const std::vector<float>& freq, const std::int64_t* positions, std::int64_t n, RopeAngle angle,
                 float* cos_out, float* sin_out);
void rope_rotate(const float* x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* cos_t,
                 const float* sin_t, const std::int64_t* table_row, bool inverse, Fmt out, float* y);

}  // namespace tdiff::emu
