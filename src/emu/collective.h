#pragma once
// The all-reduce of a split candidate: the order in which NCCL's and RCCL's collectives (and
// the engines' own all-reduce kernels) add the ranks' partial sums, as written down in
// docs/design/tensor-parallel.md §2. Every add of ring, tree and fixed rounds to the tensor's
// format (a bf16 all-reduce rounds every partial sum to bf16); custom1 and custom2 add in
// float32 and round once.
//   ring    (§2.2) chunk c of a channel starts at ring position c+1 and adds the ranks in ring
//           order, ending at position c: s = x[c+1]; s = rnd(x[c+k] + s), k = 2..N (mod N).
//           Elements map to channels (contiguous ranges, §2.3) and to chunks by the ring's
//           loop geometry, so the start rank moves with the message size and channel count.
//   tree    (§2.4) one node's tree is a chain: s = x[N-1]; s = rnd(x[k] + s), k = N-2..0; the
//           same for every element, whatever the size.
//   fixed   rank order: s = x[0]; s = rnd(s + x[k]), k = 1..N-1 (a naive reference's order).
//   custom1 (§2.5, vLLM one-stage) float32 sum in rank order 0..N-1, rounded once.
//   custom2 (§2.5, vLLM two-stage) rank q owns packs [q floor(P/N), (q+1) floor(P/N)) of 16
//           bytes (the last rank the rest) and adds q, q+1, ..., q-1 (mod N) in float32, once.
#include <cstdint>
#include <vector>

#include "emu/arith.h"
#include "numerics/all_reduce.h"

// One rule for host and device (as emu/arith.h): emu's reduce_ranks and hip's simulated split
// (hip/collective.h) add every element through reduce_element below.
namespace tdiff::emu {

// NCCL's Simple protocol: 8 steps of 512 KiB, 4 per chunk (ALLREDUCE_CHUNKSTEPS).
inline constexpr std::int64_t kRingChunkBytes = 2 << 20;

struct ReduceSpec {
  AllReduce order = AllReduce::ring;
  arith::Fmt dtype = arith::Fmt::bf16;  // the tensor's format: every hop of ring/tree/fixed rounds to it
  int channels = 1;
  std::int64_t chunk_bytes = kRingChunkBytes;
};

namespace collective_detail {
TDIFF_HD inline std::int64_t align_up(std::int64_t x, std::int64_t a) { return (x + a - 1) / a * a; }
TDIFF_HD inline std::int64_t ceil_div(std::int64_t x, std::int64_t a) { return (x + a - 1) / a; }
TDIFF_HD inline std::int64_t at_least_1(std::int64_t x) { return x < 1 ? 1 : x; }
}  // namespace collective_detail

// Bytes of one element of the format (bf16/fp16 2, fp32 4, fp8 1): the collective's grain.
TDIFF_HD inline std::int64_t element_bytes(arith::Fmt f) {
  return f == arith::Fmt::f32 ? 4 : f == arith::Fmt::f8 ? 1 : 2;
}

// Where a ring all-reduce of n elements over `ranks` puts element e: its channel and the chunk
// (= ring position - 1 where its sum starts) inside that channel's loop.
struct RingPlace {
  int channel = 0;
  int chunk = 0;
};
TDIFF_HD inline RingPlace ring_place(std::int64_t e, std::int64_t n, int ranks, const ReduceSpec& spec) {
  using namespace collective_detail;
  const std::int64_t grain = at_least_1(16 / element_bytes(spec.dtype));  // 16-byte alignment
  // Channels: contiguous ranges of whole 16-byte cells, the last one shorter.
  const std::int64_t per_channel = align_up(ceil_div(n, spec.channels), grain);
  RingPlace p;
  p.channel = static_cast<int>(e / per_channel);
  const std::int64_t begin = p.channel * per_channel;
  const std::int64_t end = begin + per_channel < n ? begin + per_channel : n;
  const std::int64_t count = end - begin;
  // runRing's loops of N chunks of C elements; the last, short loop cuts its rest into N
  // chunks of alignUp(ceil(rem / N), grain).
  const std::int64_t chunk = at_least_1(spec.chunk_bytes / element_bytes(spec.dtype));
  const std::int64_t loop = chunk * ranks, local = e - begin, l = local / loop, rem = count - l * loop;
  const std::int64_t c_eff = rem >= loop ? chunk : align_up(ceil_div(rem, ranks), grain);
  p.chunk = static_cast<int>((local - l * loop) / c_eff);
  return p;
}

// custom2: the rank that owns the element's 16-byte pack starts its float32 sum.
TDIFF_HD inline int custom2_owner(std::int64_t e, std::int64_t n, int ranks, std::int64_t pack) {
  const std::int64_t packs = collective_detail::ceil_div(n, pack), part = packs / ranks;
  if (part == 0) return ranks - 1;
  const std::int64_t q = (e / pack) / part;
  return static_cast<int>(q < ranks - 1 ? q : ranks - 1);
}

// Element e (of n) of the all-reduce: at(r) is rank r's partial, already in spec.dtype.
template <class At>
TDIFF_HD inline float reduce_element(const At& at, int ranks, std::int64_t e, std::int64_t n, const ReduceSpec& spec) {
  const arith::Fmt f = spec.dtype;
  float s = 0;
  switch (spec.order) {
    case AllReduce::ring: {  // chunk c's sum starts at ring position c+1 and runs once around
      const int c = ring_place(e, n, ranks, spec).chunk;
      s = at((c + 1) % ranks);
      for (int k = 2; k <= ranks; ++k) s = arith::add_fmt(at((c + k) % ranks), s, f);
      break;
    }
    case AllReduce::tree:
      s = at(ranks - 1);
      for (int k = ranks - 2; k >= 0; --k) s = arith::add_fmt(at(k), s, f);
      break;
    case AllReduce::fixed:
      s = at(0);
      for (int k = 1; k < ranks; ++k) s = arith::add_fmt(s, at(k), f);
      break;
    case AllReduce::custom1:
      for (int k = 0; k < ranks; ++k) s = arith::add_rn(s, at(k));
      s = arith::round_fmt(s, f);
      break;
    case AllReduce::custom2: {
      const int q = custom2_owner(e, n, ranks, collective_detail::at_least_1(16 / element_bytes(f)));
      for (int k = 0; k < ranks; ++k) s = arith::add_rn(s, at((q + k) % ranks));
      s = arith::round_fmt(s, f);
      break;
    }
  }
  return s;
}

// The ranks' partials (each n elements, already in spec.dtype), reduced in spec.order.
std::vector<float> reduce_ranks(const std::vector<std::vector<float>>& partials, const ReduceSpec& spec);

}  // namespace tdiff::emu
