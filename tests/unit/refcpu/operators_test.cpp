// Invariants of the float64 reference operators on random inputs (never all-zero).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "refcpu/attention.h"
#include "refcpu/compressor.h"
#include "refcpu/hyper_connection.h"
#include "refcpu/indexer.h"
#include "refcpu/linear.h"
#include "refcpu/moe.h"
#include "refcpu/norm.h"
#include "refcpu/refcpu_backend.h"
#include "refcpu/rope.h"

namespace tdiff::refcpu {
namespace {

std::vector<double> random_vec(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(RefCpuOps, LinearMatchesNaiveDotProductsAndIsThreadInvariant) {
  const std::int64_t rows = 131, in = 37, out = 29;  // awkward sizes, more than two row chunks
  auto x = random_vec(rows * in, 1), w = random_vec(out * in, 2);
  std::vector<double> y1(rows * out), y2(rows * out);
  omp_set_num_threads(1);
  linear(x.data(), rows, in, w.data(), out, y1.data());
  omp_set_num_threads(3);
  linear(x.data(), rows, in, w.data(), out, y2.data());
  EXPECT_EQ(y1, y2);
  for (std::int64_t r = 0; r < rows; r += 13)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (std::int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w[o * in + k];
      EXPECT_NEAR(y1[r * out + o], acc, 1e-13);
    }
}

TEST(RefCpuOps, LinearRowResultDoesNotDependOnItsPositionInTheBatch) {
  // Padding shifts a token's row; its result must stay bit-identical.
  const std::int64_t in = 64, out = 48;
  auto w = random_vec(out * in, 3);
  auto x = random_vec(100 * in, 4);
  std::vector<double> y(100 * out), ys(37 * out);
  linear(x.data(), 100, in, w.data(), out, y.data());
  linear(x.data() + 63 * in, 37, in, w.data(), out, ys.data());  // rows 63..99 alone
  for (std::int64_t r = 0; r < 37; ++r)
    for (std::int64_t o = 0; o < out; ++o) ASSERT_EQ(ys[r * out + o], y[(63 + r) * out + o]) << r << "," << o;
}

TEST(RefCpuOps, LinearOverSeveralColumnTilesIsThreadInvariant) {
  const std::int64_t rows = 70, in = 45, out = 2 * kColTile + 17;  // two row chunks, three column tiles
  auto x = random_vec(rows * in, 11), w = random_vec(out * in, 12);
  std::vector<double> y1(rows * out), y3(rows * out);
  omp_set_num_threads(1);
  linear(x.data(), rows, in, w.data(), out, y1.data());
  omp_set_num_threads(3);
  linear(x.data(), rows, in, w.data(), out, y3.data());
  EXPECT_EQ(y1, y3);
  for (std::int64_t o = 0; o < out; o += 7) {
    double acc = 0;
    for (std::int64_t k = 0; k < in; ++k) acc += x[69 * in + k] * w[o * in + k];
    EXPECT_NEAR(y1[69 * out + o], acc, 1e-13);
  }
}

TEST(RefCpuOps, StreamedLinearIsBitIdenticalToLinear) {
  const std::int64_t rows = 131, in = 37, out = kColTile + 40;
  auto x = random_vec(rows * in, 13), w = random_vec(out * in, 14);
  std::vector<double> y(rows * out), ys(rows * out);
  linear(x.data(), rows, in, w.data(), out, y.data());
  int calls = 0;
  linear_streamed(x.data(), rows, in,
                  [&](std::int64_t r0, std::int64_t r1, double* dst) {
#pragma omp atomic
                    ++calls;
                    std::copy(w.begin() + r0 * in, w.begin() + r1 * in, dst);
                  },
                  out, ys.data());
  EXPECT_EQ(calls, 2);  // one conversion per column tile
  EXPECT_EQ(y, ys);
  // An error while converting a tile (a NaN code) reaches the caller, not std::terminate.
  EXPECT_THROW(linear_streamed(x.data(), rows, in, [](std::int64_t, std::int64_t, double*) { throw InputError("bad tile"); },
                               out, ys.data()),
               InputError);
}

TEST(RefCpuOps, LinearOfScaledRowsIsBitIdenticalToLinearOfTheScaledRows) {
  // Two row chunks (the second short), two column tiles, 1 and 3 threads, and a second call
  // that reuses the threads' buffers.
  const std::int64_t rows = kRowChunk + 9, in = 45, out = kColTile + 24;
  auto x = random_vec(rows * in, 21), w = random_vec(out * in, 22), f = random_vec(rows, 23);
  std::vector<double> scaled(x.size()), want(rows * out), got(rows * out);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < in; ++i) scaled[r * in + i] = x[r * in + i] * f[r];
  linear(scaled.data(), rows, in, w.data(), out, want.data());
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3, 3}) {
    omp_set_num_threads(threads);
    std::fill(got.begin(), got.end(), 0.0);
    linear_scaled_rows(x.data(), f.data(), rows, in, w.data(), out, got.data());
    EXPECT_EQ(got, want) << threads << " threads";
  }
  omp_set_num_threads(saved);
  // The mix is that product with f = 1/RMS of each row: the bits of rms_unweighted, then linear.
  std::vector<double> u(x.size()), mix(rows * out), want_mix(rows * out);
  rms_unweighted(x.data(), rows, in, 1e-6, u.data());
  linear(u.data(), rows, in, w.data(), out, want_mix.data());
  hc_mix(x.data(), rows, in, w.data(), out, 1e-6, mix.data());
  EXPECT_EQ(mix, want_mix);
}

TEST(RefCpuOps, ExpertPiecesFollowOpenBlasKBlocking) {
  EXPECT_EQ(expert_pieces(100), (std::vector<std::int64_t>{0, 100}));
  EXPECT_EQ(expert_pieces(2048), (std::vector<std::int64_t>{0, 384, 768, 1152, 1536, 1792, 2048}));
  const auto p = expert_pieces(4096);  // nine of 384, then 640 halved
  ASSERT_EQ(p.size(), 12u);
  EXPECT_EQ(p[9], 9 * 384);
  EXPECT_EQ(p[10], 9 * 384 + 320);
  EXPECT_EQ(p[11], 4096);
}

TEST(RefCpuOps, RoutedExpertsOverSeveralPiecesAreThreadAndBatchInvariant) {
  // Widths of several column pieces and tiles (one tile short); expert 0 gets two row chunks.
  const std::int64_t N = 45, D = 1000, I = 520, E = 3, K = 2;
  const auto z = random_vec(N * D, 21), wt = random_vec(N * K, 22);
  const auto gate_up = random_vec(E * 2 * I * D, 23, 1.0 / std::sqrt(double(D)));
  const auto down = random_vec(E * D * I, 24, 1.0 / std::sqrt(double(I)));
  std::vector<std::int64_t> idx(N * K);
  for (std::int64_t t = 0; t < N; ++t) idx[t * K] = 0, idx[t * K + 1] = 1 + t % 3 / 2;
  const ExpertRows rows = [&](std::int64_t e, int part, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                              std::int64_t c1, double* dst) {
    const std::int64_t cols = part == 0 ? D : I;
    const double* w = part == 0 ? gate_up.data() + e * 2 * I * D : down.data() + e * D * I;
    for (std::int64_t r = r0; r < r1; ++r) std::copy(w + r * cols + c0, w + r * cols + c1, dst + (r - r0) * (c1 - c0));
  };
  auto run = [&](std::int64_t t0, std::int64_t n) {
    std::vector<double> y(n * D);
    routed_experts(z.data() + t0 * D, n, D, idx.data() + t0 * K, wt.data() + t0 * K, K, rows, E, I, 10.0, y.data());
    return y;
  };
  omp_set_num_threads(1);
  const auto y1 = run(0, N);
  omp_set_num_threads(3);
  EXPECT_EQ(run(0, N), y1);
  const auto part = run(10, 5);  // five tokens alone: other row counts per expert
  for (std::int64_t i = 0; i < 5 * D; ++i) ASSERT_EQ(part[i], y1[10 * D + i]) << i;
  // The same FFN as the shared expert's (whole products), up to rounding.
  for (std::int64_t t : {0, 44}) {
    std::vector<double> ref(D, 0.0), f(D);
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t e = idx[t * K + k];
      const double* gu = gate_up.data() + e * 2 * I * D;
      swiglu_ffn(z.data() + t * D, 1, D, gu, gu + I * D, down.data() + e * D * I, I, 10.0, f.data());
      for (std::int64_t c = 0; c < D; ++c) ref[c] += wt[t * K + k] * f[c];
    }
    for (std::int64_t c = 0; c < D; ++c) ASSERT_NEAR(y1[t * D + c], ref[c], 1e-12) << t << "," << c;
  }
}

TEST(RefCpuOps, RmsNormHasUnitRmsBeforeTheWeight) {
  const std::int64_t rows = 5, n = 33;
  auto x = random_vec(rows * n, 5, 3.0);
  std::vector<double> g(n, 1.0), y(rows * n);
  rms_norm(x.data(), rows, n, g.data(), 0.0 + 1e-300, y.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t i = 0; i < n; ++i) ss += y[r * n + i] * y[r * n + i];
    EXPECT_NEAR(ss / n, 1.0, 1e-12);
  }
}

TEST(RefCpuOps, RopePreservesNormsAndInverseUndoesIt) {
  RopeTable t{160000.0, true, 16.0, 256, 32, 1};
  const std::int64_t r = 16, width = 40, rows = 7;
  auto freq = rope_frequencies(t, r);
  ASSERT_EQ(freq.size(), 8u);
  EXPECT_EQ(freq[0], 1.0);  // the first pair is never interpolated
  std::vector<std::int64_t> pos = {0, 1, 5, 100, 1000, 77777, 3};
  std::vector<double> cs(rows * r / 2), sn(cs.size());
  rope_tables(freq, pos.data(), rows, cs.data(), sn.data());
  auto x = random_vec(rows * width, 6);
  std::vector<double> y(x.size()), back(x.size());
  std::vector<std::int64_t> row(rows);
  for (std::int64_t i = 0; i < rows; ++i) row[i] = i;
  rope_rotate(x.data(), rows, width, r, cs.data(), sn.data(), row.data(), false, y.data());
  rope_rotate(y.data(), rows, width, r, cs.data(), sn.data(), row.data(), true, back.data());
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < width - r; ++c) EXPECT_EQ(y[i * width + c], x[i * width + c]);
    for (std::int64_t f = 0; f < r / 2; ++f) {
      const auto a = i * width + width - r + 2 * f;
      EXPECT_NEAR(std::hypot(y[a], y[a + 1]), std::hypot(x[a], x[a + 1]), 1e-14);
    }
    for (std::int64_t c = 0; c < width; ++c) EXPECT_NEAR(back[i * width + c], x[i * width + c], 1e-14);
  }
  // Position 0 is the identity.
  for (std::int64_t c = 0; c < width; ++c) EXPECT_EQ(y[c], x[c]);
}

TEST(RefCpuOps, YarnFrequenciesOfV4FlashMatchTheSpec) {
  // Spec 3.3: V4-Flash compress table, r = 64, θ = 160000, s = 16, L0 = 65536 (float32 values).
  RopeTable t{160000.0, true, 16.0, 65536, 32, 1};
  auto w = rope_frequencies(t, 64);
  EXPECT_NEAR(w[1], 0.68765605, 1e-7);
  EXPECT_NEAR(w[15], 3.6355385e-3, 1e-9);
  EXPECT_NEAR(w[16], 2.2656249e-3, 1e-9);
  EXPECT_NEAR(w[31], 5.6805294e-7, 1e-13);
}

TEST(RefCpuOps, SinkhornColumnsSumToOneAndPreLiesInRange) {
  const std::int64_t n = 4, M = (2 + n) * n, tokens = 9;
  auto mix = random_vec(tokens * M, 7, 2.0), base = random_vec(M, 8), scale = random_vec(3, 9);
  std::vector<double> pre(tokens * n), post(tokens * n), comb(tokens * n * n);
  hc_sinkhorn(mix.data(), tokens, n, base.data(), scale.data(), 1e-6, 20, pre.data(), post.data(), comb.data());
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t s = 0; s < n; ++s) {
      EXPECT_GT(pre[t * n + s], 1e-6);
      EXPECT_LT(pre[t * n + s], 1 + 1e-6);
      EXPECT_GT(post[t * n + s], 0);
      EXPECT_LT(post[t * n + s], 2);
    }
    for (std::int64_t k = 0; k < n; ++k) {
      double col = 0, row = 0;
      for (std::int64_t a = 0; a < n; ++a) col += comb[(t * n + a) * n + k], row += comb[(t * n + k) * n + a];
      EXPECT_NEAR(col, 1.0, 1e-5);
      EXPECT_NEAR(row, 1.0, 1e-2);
    }
  }
}

TEST(RefCpuOps, PoolingIsAConvexCombinationOfItsWindow) {
  const std::int64_t rate = 4, width = 3, len = 14;  // 3 entries, 2 trailing tokens unused
  for (bool overlap : {false, true}) {
    const std::int64_t c = overlap ? 2 : 1;
    auto P = random_vec(len * c * width, 10), Z = random_vec(len * c * width, 11, 3.0), pb = random_vec(rate * c * width, 12);
    std::vector<double> out((len / rate) * width);
    gated_pool(P.data(), Z.data(), len, pb.data(), rate, width, overlap, out.data());
    for (std::int64_t w = 0; w < len / rate; ++w)
      for (std::int64_t ch = 0; ch < width; ++ch) {
        double lo = INFINITY, hi = -INFINITY;
        auto see = [&](std::int64_t t, std::int64_t col) { lo = std::min(lo, P[t * c * width + col]), hi = std::max(hi, P[t * c * width + col]); };
        for (std::int64_t j = 0; j < rate; ++j) {
          see(w * rate + j, (overlap ? width : 0) + ch);
          if (overlap && w > 0) see((w - 1) * rate + j, ch);
        }
        EXPECT_GE(out[w * width + ch], lo - 1e-15);
        EXPECT_LE(out[w * width + ch], hi + 1e-15);
      }
  }
}

TEST(RefCpuOps, AttentionWithNoVisibleKeyGivesZeroAndProbabilitiesNeverExceedOne) {
  const std::int64_t S = 6, H = 2, d = 8;
  auto q = random_vec(S * H * d, 13, 2.0), kv = random_vec(S * d, 14);
  std::vector<std::uint8_t> win(S * S, 0);
  for (std::int64_t i = 1; i < S; ++i)
    for (std::int64_t j = 1; j <= i; ++j) win[i * S + j] = 1;  // query 0 sees nothing
  std::vector<double> sinks = {0.3, -1.2}, o(S * H * d);
  attention_row(q.data(), kv.data(), win.data(), nullptr, nullptr, S, S, 0, H, d, sinks.data(), o.data());
  for (std::int64_t c = 0; c < H * d; ++c) EXPECT_EQ(o[c], 0.0);
  // Query 1 sees only key 1: o = p·kv[1] with p = e^ℓ/(e^ℓ + e^s) < 1.
  for (std::int64_t h = 0; h < H; ++h) {
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += q[(1 * H + h) * d + c] * kv[1 * d + c];
    const double l = dot / std::sqrt(double(d));
    const double p = std::exp(l) / (std::exp(l) + std::exp(sinks[h]));
    for (std::int64_t c = 0; c < d; ++c) EXPECT_NEAR(o[(1 * H + h) * d + c], p * kv[d + c], 1e-14);
  }
}

TEST(RefCpuOps, TopkTieRules) {
  // The spec's example (5.11): scores [0,0,1,0,0,−∞,0], k = 3.
  const double v[] = {0, 0, 1, 0, 0, -INFINITY, 0};
  std::int64_t low[3], torch[3];
  topk_indices(v, 7, 3, TieRule::lowest_index, low);
  EXPECT_EQ(low[0], 2);
  EXPECT_EQ(low[1], 0);
  EXPECT_EQ(low[2], 1);
  topk_indices(v, 7, 3, TieRule::torch_cpu, torch);
  std::vector<std::int64_t> set(torch, torch + 3);
  std::sort(set.begin(), set.end());
  EXPECT_EQ(set, (std::vector<std::int64_t>{2, 3, 4}));  // what torch picked on the CPU
  std::int64_t sel[3];
  topk_select(v, 7, 3, 3, TieRule::lowest_index, sel);  // only entries 0..2 causal
  EXPECT_EQ(sel[0], 0);
  EXPECT_EQ(sel[1], 1);
  EXPECT_EQ(sel[2], 2);
}

TEST(RefCpuOps, SwigluClipsGateAboveAndUpBothWays) {
  const std::int64_t D = 2, I = 1;
  const double x[] = {1.0, 0.0};
  const double Wg[] = {50.0, 0.0}, Wu[] = {-30.0, 0.0}, Wd[] = {1.0, 2.0};
  double y[2];
  swiglu_ffn(x, 1, D, Wg, Wu, Wd, I, 10.0, y);
  const double h = 10.0 / (1.0 + std::exp(-10.0)) * -10.0;
  EXPECT_DOUBLE_EQ(y[0], h);
  EXPECT_DOUBLE_EQ(y[1], 2 * h);
  const double logit[] = {-3.0, 0.5, 25.0};
  double score[3];
  router_scores(logit, 3, score);
  EXPECT_NEAR(score[0], std::sqrt(std::log1p(std::exp(-3.0))), 1e-15);
  EXPECT_EQ(score[2], std::sqrt(25.0));
}

}  // namespace
}  // namespace tdiff::refcpu
