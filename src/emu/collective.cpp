// The all-reduce orders of emu/collective.h.
#include "emu/collective.h"

#include <algorithm>
#include <stdexcept>

namespace tdiff::emu {

namespace {

std::int64_t align_up(std::int64_t x, std::int64_t a) { return (x + a - 1) / a * a; }
std::int64_t ceil_div(std::int64_t x, std::int64_t a) { return (x + a - 1) / a; }

// Ring: the element's chunk c fixes the start; the sum runs once around the ring.
float ring_sum(const std::vector<std::vector<float>>& x, std::size_t i, int c, Fmt f) {
  const int n = static_cast<int>(x.size());
  float s = x[static_cast<std::size_t>((c + 1) % n)][i];
  for (int k = 2; k <= n; ++k) s = arith::add_fmt(x[static_cast<std::size_t>((c + k) % n)][i], s, f);
  return s;
}

// custom2: the rank that owns the element's 16-byte pack starts its float32 sum.
int custom2_owner(std::int64_t e, std::int64_t n, int ranks, std::int64_t pack) {
  const std::int64_t packs = ceil_div(n, pack), part = packs / ranks;
  if (part == 0) return ranks - 1;
  return static_cast<int>(std::min<std::int64_t>(ranks - 1, (e / pack) / part));
}

}  // namespace

std::int64_t element_bytes(Fmt f) {
  switch (f) {
    case Fmt::f32: return 4;
    case Fmt::f8: return 1;
    default: return 2;
  }
}

RingPlace ring_place(std::int64_t e, std::int64_t n, int ranks, const ReduceSpec& spec) {
  const std::int64_t grain = std::max<std::int64_t>(1, 16 / element_bytes(spec.dtype));  // 16-byte alignment
  // Channels: contiguous ranges of whole 16-byte cells, the last one shorter.
  const std::int64_t per_channel = align_up(ceil_div(n, spec.channels), grain);
  RingPlace p;
  p.channel = static_cast<int>(e / per_channel);
  const std::int64_t begin = p.channel * per_channel, count = std::min(n, begin + per_channel) - begin;
  // runRing's loops of N chunks of C elements; the last, short loop cuts its rest into N
  // chunks of alignUp(ceil(rem / N), grain).
  const std::int64_t chunk = std::max<std::int64_t>(1, spec.chunk_bytes / element_bytes(spec.dtype));
  const std::int64_t loop = chunk * ranks, local = e - begin, l = local / loop, rem = count - l * loop;
  const std::int64_t c_eff = rem >= loop ? chunk : align_up(ceil_div(rem, ranks), grain);
  p.chunk = static_cast<int>((local - l * loop) / c_eff);
  return p;
}

std::vector<float> reduce_ranks(const std::vector<std::vector<float>>& x, const ReduceSpec& spec) {
  if (x.empty()) throw std::logic_error("reduce_ranks: no ranks");
  const int ranks = static_cast<int>(x.size());
  const std::size_t n = x[0].size();
  const Fmt f = spec.dtype;
  const std::int64_t pack = std::max<std::int64_t>(1, 16 / element_bytes(f));
  std::vector<float> out(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t e = 0; e < static_cast<std::int64_t>(n); ++e) {
    const auto i = static_cast<std::size_t>(e);
    float s = 0;
    switch (spec.order) {
      case AllReduce::ring: s = ring_sum(x, i, ring_place(e, static_cast<std::int64_t>(n), ranks, spec).chunk, f); break;
      case AllReduce::tree:
        s = x[static_cast<std::size_t>(ranks - 1)][i];
        for (int k = ranks - 2; k >= 0; --k) s = arith::add_fmt(x[static_cast<std::size_t>(k)][i], s, f);
        break;
      case AllReduce::fixed:
        s = x[0][i];
        for (int k = 1; k < ranks; ++k) s = arith::add_fmt(s, x[static_cast<std::size_t>(k)][i], f);
        break;
      case AllReduce::custom1:
        for (int k = 0; k < ranks; ++k) s += x[static_cast<std::size_t>(k)][i];
        s = arith::round_fmt(s, f);
        break;
      case AllReduce::custom2: {
        const int q = custom2_owner(e, static_cast<std::int64_t>(n), ranks, pack);
        for (int k = 0; k < ranks; ++k) s += x[static_cast<std::size_t>((q + k) % ranks)][i];
        s = arith::round_fmt(s, f);
        break;
      }
    }
    out[i] = s;
  }
  return out;
}

}  // namespace tdiff::emu
