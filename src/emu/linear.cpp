// The linear family: linear, grouped_linear, lm_head.
#include "emu/linear.h"

#include <algorithm>

#include "base/error.h"
#include "emu/stage_call.h"

namespace tdiff::emu {

GemmSpec matmul_spec(const Numerics& num, Fmt out, std::uint64_t seed) {
  return GemmSpec{fmt_of(num.matmul_input), fmt_of(num.matmul_accum), out, num.reduction == Reduction::atomic, seed};
}

GemmSpec logits_spec(const Numerics& num, std::uint64_t seed) {
  GemmSpec spec = matmul_spec(num, fmt_of(num.storage), seed);
  const Fmt lf = fmt_of(num.logits);
  spec.in = lf == Fmt::f16 ? Fmt::f16 : lf == Fmt::bf16 ? Fmt::bf16 : Fmt::f32;  // fp32: an SGEMM
  spec.acc = lf == Fmt::f16 ? Fmt::f16 : Fmt::f32;
  spec.out = lf;
  return spec;
}

namespace {

// linear and lm_head: x [..., K] -> y [..., O] (or [..., O / width, width] for per-head outputs).
std::vector<Tensor> run_linear(StageCall& k) {
  const Tensor& x = *k.in[0];
  const auto K = x.dim(-1), O = k.weight(0).dim(0), rows = rows_of(x);
  const GemmSpec spec = k.s.kind == OpKind::lm_head ? logits_spec(k.num, k.seed) : matmul_spec(k.num, k.st, k.seed);
  const std::vector<float> xq = operand(k.load(0, k.st), rows, K, spec.in);
  std::vector<float> y(static_cast<std::size_t>(rows * O));
  if (k.row_parallel()) {  // each rank's partial over its K range, then the all-reduce
    if (K % k.split.tp != 0) input_error("{}: K = {} does not split over tp={} ranks", k.s.name, K, k.split.tp);
    y = k.all_reduce(gemm_rank_partials(xq.data(), rows, K, k.gemm_weight(0, spec.in).data(), O, spec, k.split.tp));
  } else {
    gemm(xq.data(), rows, K, k.gemm_weight(0, spec.in).data(), O, spec, y.data());
  }
  Shape shape = x.shape();
  shape.back() = O;
  if (k.s.width > 0) shape.back() = O / k.s.width, shape.push_back(k.s.width);
  return {store(y, shape)};
}

// o_a: G groups, group g's slice of every token times its own [Ro, per] weight block.
std::vector<Tensor> run_grouped_linear(StageCall& k) {
  const auto G = k.c.o_groups, Ro = k.c.o_lora_rank, per = k.c.num_attention_heads * k.c.head_dim / G, N = k.N;
  const GemmSpec spec = matmul_spec(k.num, k.st, k.seed);
  auto x = k.load(0, k.st);
  const auto& w = k.gemm_weight(0, spec.in);
  std::vector<float> y(static_cast<std::size_t>(N * G * Ro));
  for (std::int64_t g = 0; g < G; ++g) {
    std::vector<float> xg(static_cast<std::size_t>(N * per)), yg(static_cast<std::size_t>(N * Ro));
    for (std::int64_t t = 0; t < N; ++t) std::copy_n(x.data() + t * G * per + g * per, per, xg.data() + t * per);
    xg = operand(std::move(xg), N, per, spec.in);
    gemm(xg.data(), N, per, w.data() + g * Ro * per, Ro, spec, yg.data());
    for (std::int64_t t = 0; t < N; ++t) std::copy_n(yg.data() + t * Ro, Ro, y.data() + t * G * Ro + g * Ro);
  }
  return {store(y, {k.B, k.S, G * Ro})};
}

}  // namespace

void register_linear(Handlers& h) {
  h.add({OpKind::linear, OpKind::lm_head}, run_linear);
  h.add(OpKind::grouped_linear, run_grouped_linear);
}

}  // namespace tdiff::emu
