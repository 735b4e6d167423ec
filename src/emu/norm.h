#pragma once
// The emu model of the RMSNorm kernels: one workgroup per row; each of kLanes lanes sums the
// squares of a strided slice in the statistics format, the lane sums are combined by a tree
// reduction in that format, then factor = 1/sqrt(mean + ε) (statistics format) and
// y = g ⊙ (x · factor) stored in the storage format. g = null: no weight.
#include <cstdint>

#include "numerics/policy.h"

#include "emu/numerics.h"

namespace tdiff::emu {

inline constexpr std::int64_t kLanes = 64;  // one CDNA wavefront

// The norm knobs as the kernels take them (emu and hip): the input read in the stream format
// for a hyper-connection collapse's norm (stage.stream_input), else in storage; statistics in
// norm_stats; the result stored in storage.
struct NormSpec {
  Fmt in, stats, out;
};
NormSpec norm_spec(const Numerics& num, bool stream_input);

float rms_factor(const float* x, std::int64_t n, float eps, Fmt stats);
void rms_norm(const float* x, std::int64_t rows, std::int64_t n, const float* g, float eps, Fmt stats, Fmt out,
              float* y);

}  // namespace tdiff::emu
