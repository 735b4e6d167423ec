// RoPE kernels (rope.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/rope.h"

#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__global__ void tables_kernel(const std::int64_t* pos, std::int64_t n, const float* freq, std::int64_t half,
                              RopeAngle angle, float* cos_out, float* sin_out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * half) return;
  const std::int64_t t = i / half, f = i % half;
  float phi = mul_rn(static_cast<float>(pos[t]), freq[f]);
  if (angle == RopeAngle::bf16) phi = arith::round_bf16(phi);
  if (angle == RopeAngle::f16) phi = arith::round_f16(phi);
  if (angle == RopeAngle::fast) {
    constexpr float two_pi = 6.28318548f;
    phi = sub_rn(phi, mul_rn(two_pi, rintf(phi / two_pi)));
  }
  // cos/sin in double rounded to float: the correctly rounded float values the host's cosf
  // and sinf return (device cosf/sinf may be an ulp off).
  cos_out[i] = static_cast<float>(cos(static_cast<double>(phi)));
  sin_out[i] = static_cast<float>(sin(static_cast<double>(phi)));
}

__global__ void rotate_kernel(const float* x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* cs,
                              const float* sn, std::int64_t div, std::int64_t mod, float sign, Fmt out, float* y) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t dn = width - r, half = r / 2, per_row = dn + half;
  if (i >= rows * per_row) return;
  const std::int64_t row = i / per_row, c = i % per_row;
  const float* xi = x + row * width;
  float* yi = y + row * width;
  if (c < dn) {
    yi[c] = arith::round_fmt(xi[c], out);
    return;
  }
  const std::int64_t f = c - dn, t = (row / div) % mod;
  const float a = xi[dn + 2 * f], b = xi[dn + 2 * f + 1], co = cs[t * half + f], s = sign * sn[t * half + f];
  yi[dn + 2 * f] = arith::round_fmt(sub_rn(mul_rn(a, co), mul_rn(b, s)), out);
  yi[dn + 2 * f + 1] = arith::round_fmt(add_rn(mul_rn(a, s), mul_rn(b, co)), out);
}

}  // namespace

void rope_tables(const std::int64_t* d_positions, std::int64_t n, const float* d_freq, std::int64_t half,
                 RopeAngle angle, float* d_cos, float* d_sin, hipStream_t stream) {
  if (n * half == 0) return;
  tables_kernel<<<blocks_for(n * half, 256), 256, 0, stream>>>(d_positions, n, d_freq, half, angle, d_cos, d_sin);
  check_kernel("rope_tables");
}

void rope_rotate(const float* d_x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* d_cos,
                 const float* d_sin, std::int64_t div, std::int64_t mod, bool inverse, Fmt out, float* d_y,
                 hipStream_t stream) {
  const std::int64_t total = rows * (width - r / 2);
  if (total == 0) return;
  rotate_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(d_x, rows, width, r, d_cos, d_sin, div, mod,
                                                            inverse ? -1.0f : 1.0f, out, d_y);
  check_kernel("rope_rotate");
}

}  // namespace tdiff::hip
