#pragma once
// Device-side helpers shared by the kernel files (included by .hip sources only).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "emu/arith.h"
#include "hip/vendor.h"

namespace tdiff::hip {

using arith::Fmt;

// Products and sums that the compiler may not contract into an FMA: emu's host code rounds
// the product before the add, and so must the kernel where the product is inexact (fp32).
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
// arith::fma_fmt with the product rounded first, as the host computes it.
__device__ inline float fma_fmt_rn(float a, float b, float acc, Fmt f) { return arith::round_fmt(add_rn(mul_rn(a, b), acc), f); }

// acc <- round_f(acc + v) as one atomic read-modify-write (a CAS loop), so every add of a
// split-K partial is rounded to the output format as a packed 16-bit atomic would be; the
// order of the adds is whatever order the workgroups reach it.
__device__ inline void atomic_add_fmt(float* acc, float v, Fmt f) {
  unsigned int* p = reinterpret_cast<unsigned int*>(acc);
  unsigned int old = *p, assumed;
  do {
    assumed = old;
    const float next = arith::round_fmt(add_rn(__uint_as_float(assumed), v), f);
    old = atomicCAS(p, assumed, __float_as_uint(next));
  } while (old != assumed);
}

inline unsigned blocks_for(std::int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// Throws with the kernel name when the launch failed (bad configuration, no kernel image).
inline void check_kernel(const char* name) {
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) throw std::runtime_error(std::string(name) + ": " + hipGetErrorString(e));
}

}  // namespace tdiff::hip
