// The embedding family on the device: embed (hip/elementwise.h).
#include "hip/elementwise.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

std::vector<Tensor> run_embed(StageCall& k) {
  const auto D = k.c.hidden_size;
  auto e = k.out({k.B, k.S, D}, k.st);
  embed(k.i64(0), k.N, k.weight(0), D, k.st, e.f(), k.cs);
  k.emit(std::move(e));
  return k.outputs();
}

}  // namespace

void register_embedding(Handlers& h) { h.add(OpKind::embed, run_embed); }

}  // namespace tdiff::hip
