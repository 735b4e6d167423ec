#pragma once
// The MoE family's knobs -> kernel specs, for emu and hip alike.
//   router: fp32 -> an SGEMM on the stored z (DeepSeek's inference); 16-bit -> operands,
//     logits and scores in that format, accumulated in matmul_accum.
//   experts (routed and shared SwiGLU FFNs): gate/up GEMMs stored in float32, the clipped
//     SwiGLU stored in `storage`, the down GEMM stored in `storage`; the shared expert clips
//     only with shared_clip; the routed slots are combined with atomics when the reduction
//     knob is atomic.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/gemm.h"

namespace tdiff::emu {

GemmSpec router_spec(const Numerics& num, std::uint64_t seed);

struct FfnSpec {
  GemmSpec gate_up, down;
  Fmt st;               // the SwiGLU's and the output's storage format
  bool clip;            // SwiGLU clipping at swiglu_limit
  bool atomic_combine;  // routed slots added atomically (run-dependent order)
};
FfnSpec ffn_spec(const Numerics& num, bool routed, std::uint64_t seed);

}  // namespace tdiff::emu
