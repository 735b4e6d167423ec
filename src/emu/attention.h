#pragma once
// The emu model of a flash-style attention kernel with a sink (model-spec §3.6); the block
// update itself is emu/online_softmax.h, which the hip kernels call too:
// keys are visited in blocks of kKvBlock along the concatenated axis [raw keys ; compressed
// entries]; per block the logits are accumulated in qk_accum, the running max and sum kept in
// softmax_stats, the probabilities rounded to the storage format for the P·V product
// (accumulated in pv_accum), and the output rescaled either once at the end (deferred, FA2)
// or after every block (per_block, FA1, rounded to storage each time). neg_inf: blocks the
// query sees nothing of are skipped and masked logits inside a block set to −∞; additive:
// masked logits biased by finfo(storage).min and every block visited. The P·V product runs
// over every key of a visited block (masked ones times p = 0), as an MMA does; q, k, v and P
// are MMA operands in the storage format (fp16 subnormals flushed, as on gfx90a).
#include <cstdint>

#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

inline constexpr std::int64_t kKvBlock = 64;

// The attention knobs as the kernels take them (emu and both hip kernels): storage, QKᵀ and
// P·V accumulators, softmax statistics, the mask style and rescale order, the logit scale
// d^(−1/2) (float32, computed on the host) and the additive mask's bias finfo(storage).min.
struct AttentionSpec {
  Fmt st, qk, pv, stats;
  bool additive, per_block;
  float scale, mask_bias;
};
AttentionSpec attention_spec(const Numerics& num, std::int64_t head_dim);

// One batch row. q [S,H,d], kv [Sk,d], win [S,Sk], C [n,d], cmask [S,n] (null when n = 0),
// sinks [H]; inputs already as MMA operands (storage format, mfma_operand). o [S,H,d] in the
// storage format. Keys are summed in their order, blocks of kKvBlock: raw keys, then entries.
// A prefill has Sk = S; a generation step its new queries over the cache's window.
void flash_attention_row(const float* q, const float* kv, const std::uint8_t* win, const float* C,
                         const std::uint8_t* cmask, std::int64_t S, std::int64_t Sk, std::int64_t n, std::int64_t H,
                         std::int64_t d, const float* sinks, const Numerics& num, float* o);

}  // namespace tdiff::emu
