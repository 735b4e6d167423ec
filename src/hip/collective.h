#pragma once
// A tensor-parallel split simulated on one device (docs/design/tensor-parallel.md §4): the
// ranks' partials computed one rank after another into one [ranks, n] buffer, then reduced on
// the device in the order emu/collective.h writes down, through the same reduce_element, so a
// split run on the vector ALU has emu's bits.
//   reduce_ranks:  partials [ranks, n] (each already in spec.dtype) -> out [n]
//   slice_columns: src [rows, cols] -> dst [rows, width] = src[:, c0 : c0 + width] (a rank's
//                  K range of a row-parallel weight)
#include <cstdint>

#include "emu/collective.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void reduce_ranks(const float* d_partials, int ranks, std::int64_t n, const emu::ReduceSpec& spec, float* d_out,
                  hipStream_t stream);
void slice_columns(const float* d_src, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t width,
                   float* d_dst, hipStream_t stream);

}  // namespace tdiff::hip
