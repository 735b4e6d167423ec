#pragma once
// Flash-style attention core with a sink (model-spec §3.6), the arithmetic of
// emu::flash_attention_row (emu/attention.h) on the GPU, for the whole batch:
//   q [B, S, H, d], kv [B, S, d] (keys = values, one KV head), win [B, S, S] (u8),
//   C [B, n, d] and cmask [B, S, n] (u8; both null when n = 0), sinks [H] -> o [B, S, H, d].
// One workgroup per (query i, up to 16 heads, row b); keys visited in 64-key blocks along
// [raw keys ; compressed entries], K tiles staged through LDS. Per block: logits accumulated
// sequentially over d in qk_accum, running max / sum in softmax_stats, P rounded as an MMA
// operand of the storage format, P·V in pv_accum over every key of the block, rescale
// deferred (FA2) or per_block (FA1); mask_style neg_inf skips blocks with no visible key.
// q, kv, C hold storage-format values (emu's loaded floats); the kernel reads them as MMA
// operands (fp16 subnormals flushed). sinks: float32 of the f64 weight. spec: the knobs,
// scale and mask bias as emu::attention_spec computes them for head_dim d.
#include <cstdint>

#include "emu/attention.h"
#include "hip/vendor.h"

namespace tdiff::hip {

// Matrix-core form (attention_on_matrix_cores): d_kv16 / d_C16 are kv and C as 16-bit
// patterns of MMA operands of the storage format (quantize_activations_bits16); then the
// logits Q·Kᵀ and each block's P·V run on the matrix cores, 16 heads per workgroup, with
// float32 accumulators in the hardware's order inside each 16-deep step (emu sums each dot
// sequentially: float roundings apart, as the matrix-core GEMMs); the softmax statistics, P
// and the running output's per-block update are emu's arithmetic. Null: the kernel above.
void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const emu::AttentionSpec& spec, float* d_o, hipStream_t stream,
               const std::uint16_t* d_kv16 = nullptr, const std::uint16_t* d_C16 = nullptr);

// Whether attention may run on the matrix cores under `spec`: a device with them
// (`matrix_cores`), 16-bit storage, float32 qk_accum and pv_accum.
bool attention_on_matrix_cores(const emu::AttentionSpec& spec, bool matrix_cores);

}  // namespace tdiff::hip
