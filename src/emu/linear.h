#pragma once
// The linear family's knobs -> GEMM spec (emu/gemm.h), for emu and hip alike.
//   linear, grouped_linear, cmp_proj, idx_weights and the experts' GEMMs: operands in
//   matmul_input, accumulator matmul_accum, result stored in `out`, split-K atomics when the
//   reduction knob is atomic.
//   lm_head: the logits knob sets the whole GEMM: fp16 -> fp16 operands and accumulator,
//   bf16 -> bf16 operands and a float32 accumulator, fp32 -> an SGEMM; stored in logits.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/gemm.h"

namespace tdiff::emu {

GemmSpec matmul_spec(const Numerics& num, Fmt out, std::uint64_t seed);
GemmSpec logits_spec(const Numerics& num, std::uint64_t seed);

}  // namespace tdiff::emu
