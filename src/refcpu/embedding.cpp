// Token embedding of the reference (model-spec §4.1 step 1): ids [B, S], E [V, D] -> e [B, S, D],
// e[t] = E[ids[t]] (a copy: exact).
#include <cstring>

#include "refcpu/stage_call.h"

namespace tdiff::refcpu {

namespace {

// A streamed table (real widths) converts only the rows the ids read.
std::vector<Tensor> run_embed(StageCall& r) {
  const auto D = r.c.hidden_size;
  Tensor e(DType::f64, {r.B, r.S, D});
  const auto* ids = r.i64(0);
  if (r.streamed(0)) {
    for (std::int64_t t = 0; t < r.N; ++t) r.weight_rows(0, ids[t], ids[t] + 1, e.data<double>() + t * D);
    return {e};
  }
  const Tensor& E = r.weight(0);
  for (std::int64_t t = 0; t < r.N; ++t)
    std::memcpy(e.data<double>() + t * D, E.data<double>() + ids[t] * D, static_cast<std::size_t>(D) * 8);
  return {e};
}

}  // namespace

void register_embedding(Handlers& t) { t.add(OpKind::embed, run_embed); }

}  // namespace tdiff::refcpu
