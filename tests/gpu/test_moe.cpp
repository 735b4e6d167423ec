// covers: router, moe_weights, moe_experts, moe_shared
// MoE kernels: router scores and routing weights against refcpu; the routed experts as the
// backend runs them (tokens gathered per expert, gate|up grouped GEMM, clipped SwiGLU, down
// grouped GEMM, weighted combine) against refcpu::routed_experts; the atomic combine differs
// from launch to launch only in the last bits.
#include "gpu_test.h"
#include "hip/gemm.h"
#include "hip/moe.h"
#include "refcpu/moe.h"

namespace tdiff::gputest {
namespace {

TEST(Moe, RouterScoresAndWeights) {
  const std::int64_t N = 45, E = 24, K = 4;
  auto rng = test_rng();
  auto logit = random_magnitudes(rng, N * E, 0.05f, 30.0f);  // both sides of the softplus switch at 20
  Dev<float> d_logit(logit), d_score(N * E);
  hip::router_scores(d_logit.ptr(), N * E, Fmt::f32, d_score.ptr(), test_stream());
  const auto score = d_score.get();
  std::vector<double> ld(logit.begin(), logit.end()), sr(ld.size());
  refcpu::router_scores(ld.data(), N * E, sr.data());
  EXPECT_LE(error_vs(score, sr).rel_l2, 1e-6);

  std::vector<std::int64_t> idx(static_cast<std::size_t>(N * K));
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t k = 0; k < K; ++k) idx[static_cast<std::size_t>(t * K + k)] = (t * 5 + k * 7) % E;
  Dev<std::int64_t> d_idx(idx);
  Dev<float> d_wt(N * K);
  hip::moe_weights(d_score.ptr(), d_idx.ptr(), nullptr, N, E, K, true, 1.5f, d_wt.ptr(), test_stream());
  std::vector<double> sd(score.begin(), score.end()), wr(static_cast<std::size_t>(N * K));
  refcpu::routing_weights(sd.data(), idx.data(), N, E, K, 1.5, wr.data());
  EXPECT_LE(error_vs(d_wt.get(), wr).rel_l2, 1e-6);
}

TEST(Moe, RoutedExpertsMatchReference) {
  const std::int64_t N = 70, D = 128, I = 96, E = 8, K = 3;
  const float limit = 10.0f;
  auto rng = test_rng();
  const auto z = random_magnitudes(rng, N * D, 0.05f, 1.0f, Fmt::bf16);
  const auto gate_up = random_magnitudes(rng, E * 2 * I * D, 0.01f, 0.2f, Fmt::bf16);
  const auto down = random_magnitudes(rng, E * D * I, 0.01f, 0.2f, Fmt::bf16);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(N * K));
  std::vector<float> wt(static_cast<std::size_t>(N * K));
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t k = 0; k < K; ++k) {
      idx[static_cast<std::size_t>(t * K + k)] = (t + 3 * k) % E;  // distinct experts per token
      wt[static_cast<std::size_t>(t * K + k)] = 0.2f + 0.1f * static_cast<float>(k);
    }
  Dev<float> d_z(z), d_gu_w(gate_up), d_down_w(down), d_wt(wt), d_gu(N * K * 2 * I), d_h(N * K * I), d_slot(N * K * D);
  Dev<std::int64_t> d_idx(idx);
  Dev<std::int32_t> d_starts(E + 1), d_rows(N * K);
  auto run = [&](bool atomic) {
    hip::expert_rows(d_idx.ptr(), N * K, E, d_starts.ptr(), d_rows.ptr(), test_stream());
    hip::GemmGroups g;
    g.count = E, g.w_stride = 2 * I * D, g.d_rows = d_rows.ptr(), g.d_starts = d_starts.ptr(), g.a_div = K, g.y_rows = N * K;
    const hip::GemmSpec gu_spec{Fmt::bf16, Fmt::f32, Fmt::f32, atomic}, down_spec{Fmt::bf16, Fmt::f32, Fmt::bf16, atomic};
    hip::gemm(d_z.ptr(), D, d_gu_w.ptr(), d_gu.ptr(), 2 * I, N, D, 2 * I, gu_spec, test_stream(), g);
    hip::swiglu(d_gu.ptr(), N * K, I, true, limit, Fmt::bf16, d_h.ptr(), test_stream());
    g.w_stride = D * I, g.a_div = 1;
    hip::gemm(d_h.ptr(), I, d_down_w.ptr(), d_slot.ptr(), D, N, I, D, down_spec, test_stream(), g);
    Dev<float> d_out(N * D);
    hip::combine(d_slot.ptr(), d_wt.ptr(), N, K, D, atomic, Fmt::bf16, d_out.ptr(), test_stream());
    return d_out.get();
  };
  const auto y = run(false);
  // The gather lists: every slot once, grouped by expert in slot order.
  const auto rows = d_rows.get();
  const auto starts = d_starts.get();
  EXPECT_EQ(starts.back(), N * K);
  for (std::int64_t e = 0; e < E; ++e)
    for (auto i = starts[e]; i < starts[e + 1]; ++i) {
      ASSERT_EQ(idx[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)])], e);
      if (i > starts[e]) {
        ASSERT_LT(rows[static_cast<std::size_t>(i - 1)], rows[static_cast<std::size_t>(i)]);
      }
    }
  std::vector<double> zd(z.begin(), z.end()), gud(gate_up.begin(), gate_up.end()), dd(down.begin(), down.end()),
      wd(wt.begin(), wt.end()), yr(static_cast<std::size_t>(N * D));
  // Rows and columns of expert e's gate_up [2I, D] (part 0) or down [D, I] (part 1), as refcpu
  // asks for them.
  const refcpu::ExpertRows expert_rows = [&](std::int64_t e, int part, std::int64_t r0, std::int64_t r1,
                                             std::int64_t c0, std::int64_t c1, double* dst) {
    const std::int64_t cols = part == 0 ? D : I;
    const double* w = part == 0 ? gud.data() + e * 2 * I * D : dd.data() + e * D * I;
    for (std::int64_t r = r0; r < r1; ++r) std::copy(w + r * cols + c0, w + r * cols + c1, dst + (r - r0) * (c1 - c0));
  };
  refcpu::routed_experts(zd.data(), N, D, idx.data(), wd.data(), K, expert_rows, E, I, limit, yr.data());
  const Error e = error_vs(y, yr);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LE(e.rel_l2, 2 * unit_ulp(Fmt::bf16)) << e.rel_l2;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(false), y) << "fixed reduction must repeat bit for bit";
  const auto ya = run(true);
  EXPECT_LE(error_vs(ya, yr).rel_l2, 2 * unit_ulp(Fmt::bf16));
}

// Hash routing: the rows of tid2eid picked by token id, ids at both ends of the vocabulary.
TEST(Moe, HashRouteGathersTheTableRows) {
  const std::int64_t V = 1000, K = 6, N = 77;
  std::vector<std::int64_t> table(static_cast<std::size_t>(V * K)), ids(static_cast<std::size_t>(N));
  auto rng = test_rng();
  for (auto& v : table) v = static_cast<std::int64_t>(rng() % 256);
  for (std::int64_t t = 0; t < N; ++t) ids[static_cast<std::size_t>(t)] = t == 0 ? 0 : t == 1 ? V - 1 : static_cast<std::int64_t>(rng() % V);
  Dev<std::int64_t> d_table(table), d_ids(ids), d_idx(N * K);
  hip::hash_route(d_ids.ptr(), d_table.ptr(), N, V, K, d_idx.ptr(), test_stream());
  const auto idx = d_idx.get();
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t k = 0; k < K; ++k)
      ASSERT_EQ(idx[static_cast<std::size_t>(t * K + k)], table[static_cast<std::size_t>(ids[static_cast<std::size_t>(t)] * K + k)])
          << t << "," << k;
}

}  // namespace
}  // namespace tdiff::gputest
