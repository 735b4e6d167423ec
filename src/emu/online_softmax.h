#pragma once
// The online-softmax block update of the attention kernels, host and device: emu's
// flash_attention_row and both of hip's attention kernels call these, so the rule is written
// once. Per query and head the state is the running max m, the running sum l (both in the
// statistics format) and the output accumulator; a block of keys updates it:
//   s_j   = round_stats(dot_j · scale)        (+ finfo(storage).min in stats when masked, additive)
//   m_new = max(m, max_j s_j),  alpha = round_stats(exp(m − m_new))
//   p_j   = exp(s_j − m_new) as a 16-bit MMA operand of the storage format (0 where s_j = −∞)
//   l     = round_stats(round_stats(l · alpha) + l_blk),  l_blk = Σ_j p_j in stats, in key order
//   acc   = deferred (FA2):   round_pv(round_pv(acc · alpha) + blk)
//           per_block (FA1):  round_st((acc · l_old · alpha + blk) / l)
//   o     = deferred: round_st(acc / l); per_block: acc
// Every operation is rounded as written (arith.h's *_rn: no FMA contraction on the device).
#include "emu/arith.h"

namespace tdiff::emu::online_softmax {

using arith::Fmt;

// A visible key's (or, additive mask, a masked key's) logit from its dot product.
TDIFF_HD inline float logit(float dot, float scale, bool visible, float mask_bias, Fmt stats) {
  const float s = arith::round_fmt(arith::mul_rn(dot, scale), stats);
  return visible ? s : arith::add_fmt(s, mask_bias, stats);
}
// max(m, s) as std::max(m, s) computes it (m when s is NaN).
TDIFF_HD inline float max_of(float m, float s) { return m < s ? s : m; }
// The factor that rescales the old state to the new max.
TDIFF_HD inline float alpha(float m, float m_new, Fmt stats) {
  return arith::round_fmt(arith::exp_f32(m - m_new), stats);
}
// A key's probability as the P·V product's operand (−∞: a key never used).
TDIFF_HD inline float prob(float s, float m_new, Fmt st) {
  return s == -INFINITY ? 0.0f : arith::mfma_operand(arith::exp_f32(s - m_new), st);
}
TDIFF_HD inline float running_sum(float l, float alpha, float l_blk, Fmt stats) {
  return arith::add_fmt(arith::mul_fmt(l, alpha, stats), l_blk, stats);
}
// One output channel after a block whose P·V sum for it is `blk`.
TDIFF_HD inline float update(float acc, float blk, float alpha, float l_old, float l, bool per_block, Fmt pv, Fmt st) {
  if (!per_block) return arith::add_fmt(arith::mul_fmt(acc, alpha, pv), blk, pv);
  return arith::round_fmt(arith::div_rn(arith::add_rn(arith::mul_rn(arith::mul_rn(acc, l_old), alpha), blk), l), st);
}
TDIFF_HD inline float output(float acc, float l, bool per_block, Fmt st) {
  return per_block ? acc : arith::round_fmt(arith::div_rn(acc, l), st);
}

}  // namespace tdiff::emu::online_softmax
