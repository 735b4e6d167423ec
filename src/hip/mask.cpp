// The mask family on the device: the sliding window and the compressed entries (hip/mask.h).
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

// Inputs: the compressed entries C [B, n, d] (only its shape is read), pos [B, S], and for
// CSA the indexer's selection [B, S, top].
std::vector<Tensor> run_cmp_mask(StageCall& k) {
  const std::int64_t n = k.shape(0).at(1);
  const bool picked = k.in.size() > 2;
  auto vis = k.out({k.B, k.S, n}, arith::Fmt::f32, DType::u8);
  compressed_mask(k.i64(1), k.batch_span(true), picked ? k.i64(2) : nullptr, k.B, k.S, n,
                  picked ? k.shape(2).at(2) : 0, k.s.rate, vis.u8(), k.cs);
  k.emit(std::move(vis));
  return k.outputs();
}

}  // namespace

void register_mask(Handlers& h) {
  h.add(OpKind::window_mask, run_window_mask);
  h.add(OpKind::cmp_mask, run_cmp_mask);
}

}  // namespace tdiff::hip
