#pragma once
// Small kernels of the hip backend: the embedding, the stream expansion, residual adds and
// format rounding.
//   embed:     ids [N] (int64), E [V, D] -> e [N, D] = round_st(E[ids[t]])
//   hc_expand: e [N, D] -> X [N, n, D] = round_sf(round_st(e)) in every stream
//   add:       y = round_f(a + b)
//   round:     y = round_f(x)
//   scale_round: y = round_f(x · s)
#include <cstdint>

#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void embed(const std::int64_t* d_ids, std::int64_t N, const float* d_E, std::int64_t D, arith::Fmt st, float* d_e,
           hipStream_t stream);
void hc_expand(const float* d_e, std::int64_t N, std::int64_t n, std::int64_t D, arith::Fmt st, arith::Fmt sf,
               float* d_X, hipStream_t stream);
void add(const float* d_a, const float* d_b, std::int64_t count, arith::Fmt f, float* d_y, hipStream_t stream);
void round_to(const float* d_x, std::int64_t count, arith::Fmt f, float* d_y, hipStream_t stream);
void scale_round(const float* d_x, std::int64_t count, float s, arith::Fmt f, float* d_y, hipStream_t stream);

}  // namespace tdiff::hip
