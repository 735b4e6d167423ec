// The linear family on the device: linear, grouped_linear, lm_head (hip/gemm.h; knobs:
// emu::matmul_spec, emu::logits_spec).
#include <algorithm>

#include "base/error.h"
#include "emu/linear.h"
#include "hip/collective.h"
#include "hip/gemm.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

// Captured float32 logits (0.5 GB at v4's vocabulary and 1024 tokens, 10 ms of the link) go
// to the host in row blocks, each copied while the next is computed (each output the same sum
// in the same order: the same bits as one GEMM).
void logits_in_blocks(StageCall& k, const GemmInput& x, const GemmWeight& w, StageCall::DevTensor y, std::int64_t rows,
                      std::int64_t K, std::int64_t O, const GemmSpec& spec) {
  auto early = k.early_copy_begin(y.shape);
  const std::int64_t block = (rows + k.logit_blocks() - 1) / k.logit_blocks();
  for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
    const std::int64_t n = std::min(block, rows - r0);
    gemm(x.rows_from(r0, K), K, w, y.f() + r0 * O, O, n, K, O, spec, k.cs);
    k.early_copy(early, y.f(), r0 * O, n * O);
  }
  k.emit_copied(std::move(y), early);
}

// The row-parallel linear of a split simulated on one device (emu's gemm_rank_partials): rank
// r's GEMM over its K range [r K/tp, (r+1) K/tp) into its partial, in the output format, then
// the all-reduce in the split's order. The weight's columns are copied out per rank (a float32
// copy of one rank's share at a time).
void row_parallel_linear(StageCall& k, const GemmInput& x, std::int64_t rows, std::int64_t K, std::int64_t O,
                         const GemmSpec& spec, float* d_y) {
  const int tp = k.split.tp;
  if (K % tp != 0) input_error("{}: K = {} does not split over tp={} ranks", k.s.name, K, tp);
  const std::int64_t width = K / tp;
  const float* w = k.weight(0, spec.in);
  float* w_rank = k.scratch(O * width);
  auto partials = k.rank_partials(tp, rows * O);
  for (int r = 0; r < tp; ++r) {
    slice_columns(w, O, K, r * width, width, w_rank, k.cs);
    gemm(x.cols_from(r * width), K, w_rank, partials->as<float>() + r * rows * O, O, rows, width, O, spec, k.cs);
  }
  k.all_reduce(partials->as<float>(), tp, rows * O, d_y);
}

// linear and lm_head: x [..., K] -> y [..., O] (or [..., O / width, width] for per-head outputs).
std::vector<Tensor> run_linear(StageCall& k) {
  const Shape sh = k.shape(0);
  const auto K = sh.back(), rows = rows_of(sh), O = k.weight_rows(0);
  const bool logits = k.s.kind == OpKind::lm_head;
  const GemmSpec spec =
      k.exact_sgemm(k.device_spec(logits ? emu::logits_spec(k.num, k.seed) : emu::matmul_spec(k.num, k.st, k.seed)), k.st, 0);
  Shape osh = sh;
  osh.back() = O;
  if (k.s.width > 0) osh.back() = O / k.s.width, osh.push_back(k.s.width);
  auto y = k.out(osh, spec.out);
  const GemmInput x = k.operand(k.load(0, k.st), rows, K, spec);
  if (k.row_parallel()) {
    row_parallel_linear(k, x, rows, K, O, spec, y.f());
    k.emit(std::move(y));
    return k.outputs();
  }
  const GemmWeight w = k.gemm_weight(0, spec);
  if (logits && spec.out == arith::Fmt::f32 && rows >= k.logit_blocks() && k.logit_blocks() > 1 && k.captures()) {
    logits_in_blocks(k, x, w, std::move(y), rows, K, O, spec);
    return k.outputs();
  }
  gemm(x, K, w, y.f(), O, rows, K, O, spec, k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

// o_a: G groups, group g's slice of every token times its own [Ro, per] weight block.
std::vector<Tensor> run_grouped_linear(StageCall& k) {
  const auto G = k.c.o_groups, Ro = k.c.o_lora_rank, per = k.c.num_attention_heads * k.c.head_dim / G, N = k.N;
  const GemmSpec spec = k.device_spec(emu::matmul_spec(k.num, k.st, k.seed));
  const GemmInput x = k.operand(k.load(0, k.st), N, G * per, spec, per);
  auto y = k.out({k.B, k.S, G * Ro}, spec.out);
  GemmGroups groups;
  groups.count = G, groups.x_stride = per, groups.w_stride = Ro * per, groups.y_stride = Ro, groups.y_rows = N;
  gemm(x, G * per, k.gemm_weight(0, spec), y.f(), G * Ro, N, per, Ro, spec, k.cs, groups);
  k.emit(std::move(y));
  return k.outputs();
}

}  // namespace

void register_linear(Handlers& h) {
  h.add({OpKind::linear, OpKind::lm_head}, run_linear);
  h.add(OpKind::grouped_linear, run_grouped_linear);
}

}  // namespace tdiff::hip
