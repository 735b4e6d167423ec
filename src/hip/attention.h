#pragma once
// Flash-style attention core with a sink (shared spec 3.6), the arithmetic of
// emu::flash_attention_row (emu/attention.h) on the GPU, for the whole batch:
//   q [B, S, H, d], kv [B, S, d] (keys = values, one KV head), win [B, S, S] (u8),
//   C [B, n, d] and cmask [B, S, n] (u8; both null when n = 0), sinks [H] -> o [B, S, H, d].
// One workgroup per (query i, up to 16 heads, row b); keys visited in 64-key blocks along
// [raw keys ; compressed entries], K tiles staged through LDS. Per block: logits accumulated
// sequentially over d in qk_accum, running max / sum in softmax_stats, P rounded as an MMA
// operand of the storage format, P·V in pv_accum over every key of the block, rescale
// deferred (FA2) or per_block (FA1); mask_style neg_inf skips blocks with no visible key.
// q, kv, C hold storage-format values (emu's loaded floats); the kernel reads them as MMA
// operands (fp16 subnormals flushed). sinks: float32 of the f64 weight.
#include <cstdint>

#include "core/policy.h"
#include "hip/stream_fwd.h"

namespace tdiff::hip {

void attention(const float* d_q, const float* d_kv, const std::uint8_t* d_win, const float* d_C,
               const std::uint8_t* d_cmask, std::int64_t B, std::int64_t S, std::int64_t n, std::int64_t H,
               std::int64_t d, const float* d_sinks, const Numerics& num, float* d_o, hipStream_t stream);

}  // namespace tdiff::hip
