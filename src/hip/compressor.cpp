// The compressor family on the device: cmp_proj (hip/gemm.h; knobs: emu::matmul_spec) and
// pool (hip/compressor.h; knobs: emu::pool_spec).
#include "emu/linear.h"
#include "hip/compressor.h"
#include "hip/gemm.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

// h -> P, Z: two projections of the same stored operand.
std::vector<Tensor> run_cmp_proj(StageCall& k) {
  const auto K = k.c.hidden_size, N = k.N;
  const GemmSpec spec = k.device_spec(emu::matmul_spec(k.num, k.st, k.seed));
  const GemmInput x = k.operand(k.load(0, k.st), N, K, spec);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto O = k.weight_rows(i);
    auto y = k.out({k.B, k.S, O}, spec.out);
    gemm(x, K, k.gemm_weight(i, spec), y.f(), O, N, K, O, spec, k.cs);
    k.emit(std::move(y));
  }
  return k.outputs();
}

std::vector<Tensor> run_pool(StageCall& k) {
  const auto n = k.S / k.s.rate;
  auto y = k.out({k.B, n, k.s.width}, k.st);
  gated_pool(k.load(0, k.st), k.load(1, k.st), k.B, k.S, k.batch_span(false), k.batch_span(true), k.weight(0), k.s.rate,
             k.s.width, k.s.overlap, emu::pool_spec(k.num), y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

}  // namespace

void register_compressor(Handlers& h) {
  h.add(OpKind::cmp_proj, run_cmp_proj);
  h.add(OpKind::pool, run_pool);
}

}  // namespace tdiff::hip
