// covers: embed, hc_expand, add
// Embedding, stream expansion, residual add and the float64 conversion against their
// definitions (all exact).
#include "gpu_test.h"
#include "hip/elementwise.h"

namespace tdiff::gputest {
namespace {

TEST(Elementwise, EmbedExpandAddConvert) {
  const std::int64_t V = 50, D = 72, N = 31, n = 4;
  auto rng = test_rng();
  const auto E = random_magnitudes(rng, V * D);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(N));
  for (std::int64_t t = 0; t < N; ++t) ids[static_cast<std::size_t>(t)] = (t * 13) % V;
  Dev<float> d_E(E), d_e(N * D), d_X(N * n * D), d_sum(N * D);
  Dev<std::int64_t> d_ids(ids);
  hip::embed(d_ids.ptr(), N, d_E.ptr(), D, Fmt::bf16, d_e.ptr(), test_stream());
  hip::hc_expand(d_e.ptr(), N, n, D, Fmt::bf16, Fmt::f32, d_X.ptr(), test_stream());
  hip::add(d_e.ptr(), d_e.ptr(), N * D, Fmt::f16, d_sum.ptr(), test_stream());
  const auto e = d_e.get(), X = d_X.get(), sum = d_sum.get();
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t c = 0; c < D; ++c) {
      const float want = arith::round_bf16(E[static_cast<std::size_t>(ids[static_cast<std::size_t>(t)] * D + c)]);
      ASSERT_EQ(e[static_cast<std::size_t>(t * D + c)], want);
      for (std::int64_t k = 0; k < n; ++k) ASSERT_EQ(X[static_cast<std::size_t>((t * n + k) * D + c)], want);
      ASSERT_EQ(sum[static_cast<std::size_t>(t * D + c)], arith::round_f16(want + want));
    }
}

}  // namespace
}  // namespace tdiff::gputest
