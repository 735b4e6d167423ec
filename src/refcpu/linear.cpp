#include "refcpu/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "refcpu/stage_call.h"
#include "base/parallel_errors.h"

namespace tdiff::refcpu {

namespace {

// One DGEMM on the calling thread: parallelism comes from the fixed blocks (and callers'
// loops), never from OpenBLAS, whose own threading would split a product by the thread count.
// The OpenMP build of OpenBLAS runs serially inside an active parallel region and otherwise
// takes omp_get_max_threads() threads (openblas_set_num_threads would change the program's
// OpenMP thread count), so outside a region the count is set to 1 around the call.
void dgemm_serial(int M, int N, int K, const double* a, int lda, const double* b, int ldb, double* c, int ldc,
                  bool b_transposed = true, double beta = 0.0) {
  const bool own_region = omp_in_parallel() == 0;
  const int saved = own_region ? omp_get_max_threads() : 1;
  if (own_region) omp_set_num_threads(1);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, M, N, K, 1.0, a, lda, b, ldb, beta,
              c, ldc);
  if (own_region) omp_set_num_threads(saved);
}

std::int64_t blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

// y[r0 .. r0+n) = x[r0 .. r0+n) · W_tileᵀ for one chunk of n <= `chunk` rows against one tile
// of `out` rows of W (strides ldx, ldw, ldy), serial. A short chunk is padded to a full one,
// so every call of a product has the same shape (linear.h).
void product_block(std::int64_t chunk, const double* x, std::int64_t ldx, std::int64_t r0, std::int64_t n,
                   std::int64_t in, const double* w, std::int64_t ldw, std::int64_t out, double* y, std::int64_t ldy) {
  const auto K = static_cast<int>(in), N = static_cast<int>(out), M = static_cast<int>(chunk);
  if (n == chunk) {
    dgemm_serial(M, N, K, x + r0 * ldx, static_cast<int>(ldx), w, static_cast<int>(ldw), y + r0 * ldy,
                 static_cast<int>(ldy));
    return;
  }
  std::vector<double> X(static_cast<std::size_t>(chunk * in), 0.0), Y(static_cast<std::size_t>(chunk * out));
  for (std::int64_t r = 0; r < n; ++r) std::copy_n(x + (r0 + r) * ldx, in, X.data() + r * in);
  dgemm_serial(M, N, K, X.data(), K, w, static_cast<int>(ldw), Y.data(), N);
  for (std::int64_t r = 0; r < n; ++r) std::copy_n(Y.data() + r * out, out, y + (r0 + r) * ldy);
}

// Every (row chunk, column tile) block of a product with W resident, spread over threads.
void product(const double* x, std::int64_t ldx, std::int64_t rows, std::int64_t in, const double* w, std::int64_t ldw,
             std::int64_t out, double* y, std::int64_t ldy) {
  const std::int64_t chunks = blocks(rows, kRowChunk), tiles = blocks(out, kColTile);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    for (std::int64_t t = 0; t < tiles; ++t)
      product_block(kRowChunk, x, ldx, c * kRowChunk, std::min(kRowChunk, rows - c * kRowChunk), in,
                    w + t * kColTile * ldw, ldw, std::min(kColTile, out - t * kColTile), y + t * kColTile, ldy);
}

}  // namespace

void linear_scaled_rows(const double* x, const double* f, std::int64_t rows, std::int64_t in, const double* w,
                        std::int64_t out, double* y) {
  const std::int64_t chunks = blocks(rows, kRowChunk), tiles = blocks(out, kColTile);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    thread_local std::vector<double> scaled;  // kept: its pages are touched once per thread, not per call
    const std::int64_t r0 = c * kRowChunk, n = std::min(kRowChunk, rows - r0);
    scaled.resize(static_cast<std::size_t>(kRowChunk * in));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = 0; i < in; ++i) scaled[static_cast<std::size_t>(r * in + i)] = x[(r0 + r) * in + i] * f[r0 + r];
    // The blocks of product(): the same calls on the same values, so the same bits.
    for (std::int64_t t = 0; t < tiles; ++t)
      product_block(kRowChunk, scaled.data(), in, 0, n, in, w + t * kColTile * in, in, std::min(kColTile, out - t * kColTile),
                    y + r0 * out + t * kColTile, out);
  }
}

// Column tile by column tile: convert the tile, then every row chunk against it; the tiles are
// spread over threads, each holding one converted tile.
void linear_streamed(const double* x, std::int64_t rows, std::int64_t in, const WeightRows& w, std::int64_t out,
                     double* y) {
  const std::int64_t chunks = blocks(rows, kRowChunk), tiles = blocks(out, kColTile);
  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<double> tile(static_cast<std::size_t>(std::min(kColTile, out) * in));
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < tiles; ++t)
      errors.run([&] {
        const std::int64_t o0 = t * kColTile, width = std::min(kColTile, out - o0);
        w(o0, o0 + width, tile.data());
        for (std::int64_t c = 0; c < chunks; ++c)
          product_block(kRowChunk, x, in, c * kRowChunk, std::min(kRowChunk, rows - c * kRowChunk), in, tile.data(), in,
                        width, y + o0, out);
      });
  }
  errors.rethrow();
}

void linear(const double* x, std::int64_t rows, std::int64_t in, const double* w, std::int64_t out, double* y) {
  product(x, in, rows, in, w, in, out, y, out);
}

const char* blas_core() { return openblas_get_corename(); }

void gemm_serial(std::int64_t M, std::int64_t N, std::int64_t K, const double* a, std::int64_t lda, const double* b,
                 std::int64_t ldb, bool b_transposed, double* c, std::int64_t ldc) {
  dgemm_serial(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), a, static_cast<int>(lda), b,
               static_cast<int>(ldb), c, static_cast<int>(ldc), b_transposed);
}

std::vector<std::int64_t> expert_pieces(std::int64_t in) {
  constexpr std::int64_t kQ = 384, kUnroll = 16;
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t k = 0; k < in;) {
    std::int64_t step = in - k;
    if (step >= 2 * kQ) step = kQ;
    else if (step > kQ) step = (step / 2 + kUnroll - 1) / kUnroll * kUnroll;
    bounds.push_back(k += step);
  }
  return bounds;
}

void expert_tile_product(const double* x, std::int64_t rows, std::int64_t in, const TileColumns& w,
                         std::int64_t width, double* y, std::int64_t ldy, std::vector<double>& piece) {
  if (rows % kExpertRowChunk != 0) throw std::logic_error("expert_tile_product: rows not padded to a chunk");
  const std::vector<std::int64_t> bounds = expert_pieces(in);
  for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
    const std::int64_t k0 = bounds[p], kw = bounds[p + 1] - k0;
    piece.resize(static_cast<std::size_t>(width * kw));
    w(k0, k0 + kw, piece.data());
    // The first piece sets the block (beta 0), the others add to it in order.
    for (std::int64_t r = 0; r < rows; r += kExpertRowChunk)
      dgemm_serial(static_cast<int>(kExpertRowChunk), static_cast<int>(width), static_cast<int>(kw), x + r * in + k0,
                   static_cast<int>(in), piece.data(), static_cast<int>(kw), y + r * ldy, static_cast<int>(ldy), true,
                   p == 0 ? 0.0 : 1.0);
  }
}

void grouped_linear(const double* x, std::int64_t rows, std::int64_t groups, std::int64_t in_per_group,
                    const double* w, std::int64_t out_per_group, double* y) {
  const std::int64_t chunks = blocks(rows, kRowChunk), tiles = blocks(out_per_group, kColTile);
#pragma omp parallel for collapse(3) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t t = 0; t < tiles; ++t)
        product_block(kRowChunk, x + g * in_per_group, groups * in_per_group, c * kRowChunk,
                      std::min(kRowChunk, rows - c * kRowChunk), in_per_group,
                      w + (g * out_per_group + t * kColTile) * in_per_group, in_per_group,
                      std::min(kColTile, out_per_group - t * kColTile), y + g * out_per_group + t * kColTile,
                      groups * out_per_group);
}

}  // namespace tdiff::refcpu

namespace tdiff::refcpu {

namespace {

// linear and lm_head; a stage with a width splits the output features head-major.
std::vector<Tensor> run_linear(StageCall& r) {
  const Tensor& x = *r.in[0];
  const auto out = r.ctx.weights.shape(r.s.weights.at(0)).at(0), rows = rows_of(x);
  Tensor y(DType::f64, with_last(x.shape(), out));
  if (r.streamed(0))
    linear_streamed(r.f64(0), rows, x.dim(-1), [&](std::int64_t r0, std::int64_t r1, double* dst) { r.weight_rows(0, r0, r1, dst); },
                    out, y.data<double>());
  else
    linear(r.f64(0), rows, x.dim(-1), r.weight(0).data<double>(), out, y.data<double>());
  if (r.s.width > 0) {
    Shape hs = x.shape();
    hs.back() = out / r.s.width;
    hs.push_back(r.s.width);
    y = y.reshaped(hs);
  }
  return {y};
}

std::vector<Tensor> run_grouped_linear(StageCall& r) {
  const Tensor& w = r.weight(0);
  const auto G = r.c.o_groups, Ro = r.c.o_lora_rank, per = r.c.num_attention_heads * r.c.head_dim / G;
  Tensor y(DType::f64, {r.B, r.S, G * Ro});
  grouped_linear(r.f64(0), r.N, G, per, w.data<double>(), Ro, y.data<double>());
  return {y};
}

}  // namespace

void register_linear(Handlers& t) {
  t.add({OpKind::linear, OpKind::lm_head}, run_linear);
  t.add(OpKind::grouped_linear, run_grouped_linear);
}

}  // namespace tdiff::refcpu
