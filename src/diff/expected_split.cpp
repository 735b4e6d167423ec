#include "diff/expected_split.h"

#include <fmt/format.h>

namespace tdiff {

namespace {

double hop_ratio(int n) { return (n + 1) / 2.0 - 1.0 / n; }  // Σ_{j=2..N} j/N

bool rounds_every_hop(AllReduce a) { return a == AllReduce::ring || a == AllReduce::tree || a == AllReduce::fixed; }

}  // namespace

SplitRounding split_rounding(const Stage& s, const Split& split, const ModelConfig& c) {
  SplitRounding r;
  const bool moe_tp = split.tp > 1 && split.ep == 1;
  const bool o_b = split.tp > 1 && s.op_class == "attn.o_b";
  const bool branch = moe_tp && (s.op_class == "moe.experts" || s.op_class == "moe.shared");
  const bool out = moe_tp && s.op_class == "moe.out" && split.moe_reduce == MoeReduce::sum_then_reduce;
  if (!o_b && !branch && !out) return r;
  r.ranks = split.tp;
  r.split_k = o_b ? c.o_groups * c.o_lora_rank : branch ? c.moe_intermediate_size : 0;
  r.partials = 1.0;  // o_b and the branches: each rank's partial; moe.out: each rank's routed + shared
  const bool reduced_here = o_b || out || (branch && split.moe_reduce == MoeReduce::reduce_each);
  const std::string order = allreduce_name(split.allreduce);
  if (!reduced_here) {  // the branch's value is the exact sum of its rounded partials
    r.output_rounded = false;
    r.note = fmt::format("tp={}: {} partials", split.tp, split.tp);
    return r;
  }
  if (rounds_every_hop(split.allreduce)) {
    r.hops = hop_ratio(split.tp);
    r.output_rounded = false;
    r.note = fmt::format("tp={} {}: {} partials + {} hops", split.tp, order, split.tp, split.tp - 1);
  } else {
    r.note = fmt::format("tp={} {}: {} partials, summed in float32, rounded once", split.tp, order, split.tp);
  }
  return r;
}

}  // namespace tdiff
