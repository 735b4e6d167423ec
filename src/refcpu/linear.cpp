#include "refcpu/linear.h"

#include <Eigen/Dense>

namespace tdiff::refcpu {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {
// y[r, :] for rows [r0, r1) with row strides ldx / ldy and a weight block of `out` rows.
void chunked_product(const double* x, std::int64_t ldx, std::int64_t rows, std::int64_t in, const double* w,
                     std::int64_t ldw, std::int64_t out, double* y, std::int64_t ldy) {
  const std::int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<const RowMat, 0, Stride> W(w, out, in, Stride(ldw));
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t r0 = c * kRowChunk, n = std::min(kRowChunk, rows - r0);
    if (n == kRowChunk) {
      Eigen::Map<const RowMat, 0, Stride> X(x + r0 * ldx, n, in, Stride(ldx));
      Eigen::Map<RowMat, 0, Stride> Y(y + r0 * ldy, n, out, Stride(ldy));
      Y.noalias() = X * W.transpose();
      continue;
    }
    // A short chunk is padded to a full one: Eigen picks its product kernel and blocking from
    // the sizes, so every product has the same shape and a row's bits never depend on how many
    // rows share the call (padding, tokens per expert).
    RowMat X = RowMat::Zero(kRowChunk, in);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t k = 0; k < in; ++k) X(r, k) = x[(r0 + r) * ldx + k];
    RowMat Y = X * W.transpose();
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t o = 0; o < out; ++o) y[(r0 + r) * ldy + o] = Y(r, o);
  }
}
}  // namespace

void linear(const double* x, std::int64_t rows, std::int64_t in, const double* w, std::int64_t out, double* y) {
  Eigen::setNbThreads(1);  // parallelism comes from the fixed row chunks, never from Eigen
  chunked_product(x, in, rows, in, w, in, out, y, out);
}

void grouped_linear(const double* x, std::int64_t rows, std::int64_t groups, std::int64_t in_per_group,
                    const double* w, std::int64_t out_per_group, double* y) {
  Eigen::setNbThreads(1);
  for (std::int64_t g = 0; g < groups; ++g)
    chunked_product(x + g * in_per_group, groups * in_per_group, rows, in_per_group,
                    w + g * out_per_group * in_per_group, in_per_group, out_per_group, y + g * out_per_group,
                    groups * out_per_group);
}

}  // namespace tdiff::refcpu
