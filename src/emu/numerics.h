#pragma once
// Bridges the policy (numerics/policy.h) to the kernels' arithmetic formats (emu/arith.h).
#include "numerics/policy.h"
#include "emu/arith.h"

namespace tdiff::emu {

using arith::Fmt;

inline Fmt fmt_of(DType t) {
  switch (t) {
    case DType::bf16: return Fmt::bf16;
    case DType::f16: return Fmt::f16;
    case DType::f8_e4m3: return Fmt::f8;
    default: return Fmt::f32;
  }
}

// Stage identity mixed into run-dependent orders, so two stages never share one.
std::uint64_t stage_hash(const std::string& name, std::uint64_t run_seed);

}  // namespace tdiff::emu
