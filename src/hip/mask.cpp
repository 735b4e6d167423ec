// The mask family on the device: the sliding window (hip/mask.h); the compressed-entry masks
// are small and read the indexer's selection, so they are refcpu's integers, uploaded.
#include "hip/mask.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

std::vector<Tensor> run_window_mask(StageCall& k) {
  auto win = k.out({k.B, k.S, k.S}, arith::Fmt::f32, DType::u8);
  window_mask(k.u8(0), k.B, k.S, k.c.sliding_window, win.u8(), k.cs);
  k.emit(std::move(win));
  return k.outputs();
}

std::vector<Tensor> run_cmp_mask(StageCall& k) {
  k.on_host();
  return k.outputs();
}

}  // namespace

void register_mask(Handlers& h) {
  h.add(OpKind::window_mask, run_window_mask);
  h.add(OpKind::cmp_mask, run_cmp_mask);
}

}  // namespace tdiff::hip
