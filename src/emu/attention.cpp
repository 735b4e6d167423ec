#include "emu/attention.h"

#include <cmath>
#include <vector>

#include "emu/numerics.h"

namespace tdiff::emu {

void flash_attention_row(const float* q, const float* kv, const std::uint8_t* win, const float* C,
                         const std::uint8_t* cmask, std::int64_t S, std::int64_t n, std::int64_t H, std::int64_t d,
                         const float* sinks, const Numerics& num, float* o) {
  const Fmt st = fmt_of(num.storage), qk = fmt_of(num.qk_accum), pv = fmt_of(num.pv_accum),
            stats = fmt_of(num.softmax_stats);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool additive = num.mask_style == MaskStyle::additive;
  const float bias = arith::finfo_min(st);
  const std::int64_t total = S + n;
  auto key = [&](std::int64_t j) { return j < S ? kv + j * d : C + (j - S) * d; };
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    std::vector<float> s(static_cast<std::size_t>(kKvBlock)), p(s.size()), acc(static_cast<std::size_t>(d));
    std::vector<std::uint8_t> vis(s.size());
    for (std::int64_t h = 0; h < H; ++h) {
      const float* qh = q + (i * H + h) * d;
      float m = arith::round_fmt(sinks[h], stats);
      float l = 1.0f;  // the sink's own exp(s − m) with m = s
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t j0 = 0; j0 < total; j0 += kKvBlock) {
        const std::int64_t j1 = std::min(total, j0 + kKvBlock);
        bool any = false;
        for (std::int64_t j = j0; j < j1; ++j) {
          vis[static_cast<std::size_t>(j - j0)] = j < S ? win[i * S + j] != 0 : cmask[i * n + (j - S)] != 0;
          any = any || vis[static_cast<std::size_t>(j - j0)];
        }
        // A −∞ kernel skips a block this query sees nothing of (block sparsity); an additive
        // mask has no such test and reads every block.
        if (!any && !additive) continue;
        float m_blk = -INFINITY;
        for (std::int64_t j = j0; j < j1; ++j) {
          const bool visible = vis[static_cast<std::size_t>(j - j0)] != 0;
          float& sj = s[static_cast<std::size_t>(j - j0)];
          if (!visible && !additive) {  // where(mask, s, −∞): the key's logit is never used
            sj = -INFINITY;
            continue;
          }
          const float* kj = key(j);
          float dot = 0;
          for (std::int64_t c = 0; c < d; ++c)
            dot = arith::fma_fmt(qh[c], kj[c], dot, qk);
          sj = arith::round_fmt(dot * scale, stats);
          if (!visible) sj = arith::add_fmt(sj, bias, stats);
          m_blk = std::max(m_blk, sj);
        }
        const float m_new = std::max(m, m_blk);
        const float alpha = arith::round_fmt(std::exp(m - m_new), stats);
        float l_blk = 0;
        for (std::int64_t j = j0; j < j1; ++j) {
          float& pj = p[static_cast<std::size_t>(j - j0)];
          const float sj = s[static_cast<std::size_t>(j - j0)];
          pj = sj == -INFINITY ? 0.0f : arith::mfma_operand(std::exp(sj - m_new), st);  // P feeds a 16-bit MMA
          l_blk = arith::add_fmt(l_blk, pj, stats);
        }
        const float l_old = l;
        l = arith::add_fmt(arith::mul_fmt(l, alpha, stats), l_blk, stats);
        for (std::int64_t c = 0; c < d; ++c) {
          // The P·V MMA multiplies every key of the block, masked ones by 0 (0 × NaN = NaN).
          float blk = 0;
          for (std::int64_t j = j0; j < j1; ++j)
            blk = arith::fma_fmt(p[static_cast<std::size_t>(j - j0)], key(j)[c], blk, pv);
          float& a = acc[static_cast<std::size_t>(c)];
          if (num.rescale_order == RescaleOrder::deferred)
            a = arith::add_fmt(arith::mul_fmt(a, alpha, pv), blk, pv);
          else  // keep the output normalised after every block, stored in the storage format
            a = arith::round_fmt((a * l_old * alpha + blk) / l, st);
        }
        m = m_new;
      }
      float* oh = o + (i * H + h) * d;
      for (std::int64_t c = 0; c < d; ++c)
        oh[c] = num.rescale_order == RescaleOrder::deferred ? arith::round_fmt(acc[static_cast<std::size_t>(c)] / l, st)
                                                            : acc[static_cast<std::size_t>(c)];
    }
  }
}

}  // namespace tdiff::emu
