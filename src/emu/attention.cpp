#include "emu/attention.h"

#include <cmath>
#include <vector>

#include "emu/online_softmax.h"
#include "emu/stage_call.h"

namespace tdiff::emu {

AttentionSpec attention_spec(const Numerics& num, std::int64_t head_dim) {
  const Fmt st = fmt_of(num.storage);
  return {st,
          fmt_of(num.qk_accum),
          fmt_of(num.pv_accum),
          fmt_of(num.softmax_stats),
          num.mask_style == MaskStyle::additive,
          num.rescale_order == RescaleOrder::per_block,
          1.0f / std::sqrt(static_cast<float>(head_dim)),
          arith::finfo_min(st)};
}

void flash_attention_row(const float* q, const float* kv, const std::uint8_t* win, const float* C,
                         const std::uint8_t* cmask, std::int64_t S, std::int64_t Sk, std::int64_t n, std::int64_t H,
                         std::int64_t d, const float* sinks, const Numerics& num, float* o) {
  namespace osm = online_softmax;
  const AttentionSpec a = attention_spec(num, d);
  const std::int64_t total = Sk + n;
  auto key = [&](std::int64_t j) { return j < Sk ? kv + j * d : C + (j - Sk) * d; };
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    std::vector<float> s(static_cast<std::size_t>(kKvBlock)), p(s.size()), acc(static_cast<std::size_t>(d));
    std::vector<std::uint8_t> vis(s.size());
    for (std::int64_t h = 0; h < H; ++h) {
      const float* qh = q + (i * H + h) * d;
      float m = arith::round_fmt(sinks[h], a.stats);
      float l = 1.0f;  // the sink's own exp(s − m) with m = s
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t j0 = 0; j0 < total; j0 += kKvBlock) {
        const std::int64_t j1 = std::min(total, j0 + kKvBlock);
        bool any = false;
        for (std::int64_t j = j0; j < j1; ++j) {
          vis[static_cast<std::size_t>(j - j0)] = j < Sk ? win[i * Sk + j] != 0 : cmask[i * n + (j - Sk)] != 0;
          any = any || vis[static_cast<std::size_t>(j - j0)];
        }
        // A −∞ kernel skips a block this query sees nothing of (block sparsity); an additive
        // mask has no such test and reads every block.
        if (!any && !a.additive) continue;
        float m_blk = -INFINITY;
        for (std::int64_t j = j0; j < j1; ++j) {
          const bool visible = vis[static_cast<std::size_t>(j - j0)] != 0;
          float& sj = s[static_cast<std::size_t>(j - j0)];
          if (!visible && !a.additive) {  // where(mask, s, −∞): the key's logit is never used
            sj = -INFINITY;
            continue;
          }
          const float* kj = key(j);
          float dot = 0;
          for (std::int64_t c = 0; c < d; ++c)
            dot = arith::fma_fmt(qh[c], kj[c], dot, a.qk);
          sj = osm::logit(dot, a.scale, visible, a.mask_bias, a.stats);
          m_blk = osm::max_of(m_blk, sj);
        }
        const float m_new = osm::max_of(m, m_blk);
        const float alpha = osm::alpha(m, m_new, a.stats);
        float l_blk = 0;
        for (std::int64_t j = j0; j < j1; ++j) {
          float& pj = p[static_cast<std::size_t>(j - j0)];
          pj = osm::prob(s[static_cast<std::size_t>(j - j0)], m_new, a.st);  // P feeds a 16-bit MMA
          l_blk = arith::add_fmt(l_blk, pj, a.stats);
        }
        const float l_old = l;
        l = osm::running_sum(l, alpha, l_blk, a.stats);
        for (std::int64_t c = 0; c < d; ++c) {
          // The P·V MMA multiplies every key of the block, masked ones by 0 (0 × NaN = NaN).
          float blk = 0;
          for (std::int64_t j = j0; j < j1; ++j)
            blk = arith::fma_fmt(p[static_cast<std::size_t>(j - j0)], key(j)[c], blk, a.pv);
          float& acc_c = acc[static_cast<std::size_t>(c)];
          acc_c = osm::update(acc_c, blk, alpha, l_old, l, a.per_block, a.pv, a.st);
        }
        m = m_new;
      }
      float* oh = o + (i * H + h) * d;
      for (std::int64_t c = 0; c < d; ++c) oh[c] = osm::output(acc[static_cast<std::size_t>(c)], l, a.per_block, a.st);
    }
  }
}

namespace {

// q [B,S,H,d], kv [B,Sk,d], win [B,S,Sk] (u8) and, on compressed layers, C [B,n,d] and
// cmask [B,S,n]; the sinks are the stage's weight. Inputs read as MMA operands of storage.
// Sk = S in a prefill; a generation step's keys are the cache's window in slot order.
std::vector<Tensor> run_attention(StageCall& k) {
  const auto H = k.c.num_attention_heads, d = k.c.head_dim, B = k.B, S = k.S, Sk = k.in[1]->dim(1);
  const bool compressed = k.in.size() > 3;
  const auto n = compressed ? k.in[3]->dim(1) : 0;
  auto q = k.load(0, k.st), kv = k.load(1, k.st);
  std::vector<float> C = compressed ? k.load(3, k.st) : std::vector<float>{};
  for (auto* v : {&q, &kv, &C})
    for (float& x : *v) x = arith::mfma_operand(x, k.st);
  auto sinks = to_float(k.weight(0));
  std::vector<float> o(static_cast<std::size_t>(B * S * H * d));
  for (std::int64_t b = 0; b < B; ++b)
    flash_attention_row(q.data() + b * S * H * d, kv.data() + b * Sk * d, k.in[2]->data<std::uint8_t>() + b * S * Sk,
                        compressed ? C.data() + b * n * d : nullptr,
                        compressed ? k.in[4]->data<std::uint8_t>() + b * S * n : nullptr, S, Sk, n, H, d, sinks.data(), k.num,
                        o.data() + b * S * H * d);
  return {store(o, {B, S, H, d})};
}

}  // namespace

void register_attention(Handlers& h) { h.add(OpKind::attention, run_attention); }

}  // namespace tdiff::emu
