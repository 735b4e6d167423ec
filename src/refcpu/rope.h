#pragma once
// Rotary position embedding of the reference (model-spec §3.3, 3.4), float64.
//   frequencies: ω[f], f < r/2; plain θ^(−2f/r), or YaRN-blended with factor s.
//   tables:      cos/sin [P, r/2] of p·ω for P positions.
//   rotate:      x [N, width]: the trailing r channels in interleaved pairs (2f, 2f+1) are
//                multiplied by e^{±iφ_f}; the first width − r channels are untouched.
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace tdiff::refcpu {

std::vector<double> rope_frequencies(const RopeTable& t, std::int64_t r);
// cos/sin [positions, r/2] (row-major) for the given positions.
void rope_tables(const std::vector<double>& freq, const std::int64_t* positions, std::int64_t n,
                 double* cos_out, double* sin_out);
// Rotates `rows` vectors of `width` channels; row i uses table row table_row[i] (cos/sin
// have r/2 columns). inverse: rotate by −φ.
void rope_rotate(const double* x, std::int64_t rows, std::int64_t width, std::int64_t r, const double* cos_t,
                 const double* sin_t, const std::int64_t* table_row, bool inverse, double* y);

}  // namespace tdiff::refcpu
