#include "refcpu/linear.h"

#include <Eigen/Dense>

#include "refcpu/handlers.h"

namespace tdiff::refcpu {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

using Stride = Eigen::OuterStride<>;

// y[r0 .. r0+n) = x[r0 .. r0+n) · Wᵀ for one chunk of at most kRowChunk rows (strides ldx, ldw,
// ldy), serial. A short chunk is padded to a full one: Eigen picks its product kernel and
// blocking from the sizes, so every product has the same shape and a row's bits never depend
// on how many rows share the call (padding, tokens per expert).
void product_chunk(const double* x, std::int64_t ldx, std::int64_t r0, std::int64_t n, std::int64_t in,
                   const double* w, std::int64_t ldw, std::int64_t out, double* y, std::int64_t ldy) {
  Eigen::Map<const RowMat, 0, Stride> W(w, out, in, Stride(ldw));
  if (n == kRowChunk) {
    Eigen::Map<const RowMat, 0, Stride> X(x + r0 * ldx, n, in, Stride(ldx));
    Eigen::Map<RowMat, 0, Stride> Y(y + r0 * ldy, n, out, Stride(ldy));
    Y.noalias() = X * W.transpose();
    return;
  }
  RowMat X = RowMat::Zero(kRowChunk, in);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t k = 0; k < in; ++k) X(r, k) = x[(r0 + r) * ldx + k];
  RowMat Y = X * W.transpose();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) y[(r0 + r) * ldy + o] = Y(r, o);
}

// Parallelism comes from the fixed row chunks (and callers' loops), never from Eigen itself.
void single_threaded_eigen() {
  static const bool once = (Eigen::setNbThreads(1), true);
  (void)once;
}

}  // namespace

void linear(const double* x, std::int64_t rows, std::int64_t in, const double* w, std::int64_t out, double* y) {
  single_threaded_eigen();
  const std::int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    product_chunk(x, in, c * kRowChunk, std::min(kRowChunk, rows - c * kRowChunk), in, w, in, out, y, out);
}

void grouped_linear(const double* x, std::int64_t rows, std::int64_t groups, std::int64_t in_per_group,
                    const double* w, std::int64_t out_per_group, double* y) {
  single_threaded_eigen();
  const std::int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    for (std::int64_t g = 0; g < groups; ++g)
      product_chunk(x + g * in_per_group, groups * in_per_group, c * kRowChunk, std::min(kRowChunk, rows - c * kRowChunk),
                    in_per_group, w + g * out_per_group * in_per_group, in_per_group, out_per_group,
                    y + g * out_per_group, groups * out_per_group);
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

// linear and lm_head; a stage with a width splits the output features head-major.
std::vector<Tensor> run_linear(RefCall& r) {
  const Tensor& x = *r.in[0];
  const Tensor& w = r.weight(0);
  const auto out = w.dim(0), rows = rows_of(x);
  Tensor y(DType::f64, with_last(x.shape(), out));
  linear(r.f64(0), rows, x.dim(-1), w.data<double>(), out, y.data<double>());
  if (r.s.width > 0) {
    Shape hs = x.shape();
    hs.back() = out / r.s.width;
    hs.push_back(r.s.width);
    y = y.reshaped(hs);
  }
  return {y};
}

std::vector<Tensor> run_grouped_linear(RefCall& r) {
  const Tensor& w = r.weight(0);
  const auto G = r.c.o_groups, Ro = r.c.o_lora_rank, per = r.c.num_attention_heads * r.c.head_dim / G;
  Tensor y(DType::f64, {r.B, r.S, G * Ro});
  grouped_linear(r.f64(0), r.N, G, per, w.data<double>(), Ro, y.data<double>());
  return {y};
}

}  // namespace

void register_linear(RefHandlers& t) {
  t.add({OpKind::linear, OpKind::lm_head}, run_linear);
  t.add(OpKind::grouped_linear, run_grouped_linear);
}

}  // namespace tdiff::refcpu
