// The embedding family: embed (a table lookup, computed by refcpu) stored in the storage format.
#include "emu/stage_call.h"

namespace tdiff::emu {

namespace {

std::vector<Tensor> run_embed(StageCall& k) {
  auto out = k.refcpu_outputs();
  for (double& v : out[0].span<double>()) v = arith::round_fmt(static_cast<float>(v), k.st);
  return out;
}

}  // namespace

void register_embedding(Handlers& h) { h.add(OpKind::embed, run_embed); }

}  // namespace tdiff::emu
