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

#include "emu/numerics.h"
#include "numerics/policy.h"

namespace tdiff::emu {

// NCCL's Simple protocol: 8 steps of 512 KiB, 4 per chunk (ALLREDUCE_CHUNKSTEPS).
inline constexpr std::int64_t kRingChunkBytes = 2 << 20;

struct ReduceSpec {
  AllReduce order = AllReduce::ring;
  Fmt dtype = Fmt::bf16;  // the tensor's format: every hop of ring/tree/fixed rounds to it
  int channels = 1;
  std::int64_t chunk_bytes = kRingChunkBytes;
};

// Bytes of one element of the format (bf16/fp16 2, fp32 4, fp8 1): the collective's grain.
std::int64_t element_bytes(Fmt f);

// Where a ring all-reduce of n elements over `ranks` puts element e: its channel and the chunk
// (= ring position - 1 where its sum starts) inside that channel's loop.
struct RingPlace {
  int channel = 0;
  int chunk = 0;
};
RingPlace ring_place(std::int64_t e, std::int64_t n, int ranks, const ReduceSpec& spec);

// The ranks' partials (each n elements, already in spec.dtype), reduced in spec.order.
std::vector<float> reduce_ranks(const std::vector<std::vector<float>>& partials, const ReduceSpec& spec);

}  // namespace tdiff::emu
