// covers: rms_norm, head_rms_norm
// hip::rms_norm against emu::rms_norm (bit-identical) and refcpu (float64) for both
// statistics formats, with and without a weight, on awkward row widths.
#include "emu/norm.h"
#include "gpu_test.h"
#include "hip/norm.h"
#include "refcpu/norm.h"

namespace tdiff::gputest {
namespace {

void check(std::int64_t rows, std::int64_t n, bool weighted, Fmt stats, Fmt out) {
  SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n) + (weighted ? " weighted" : " head"));
  auto rng = test_rng(static_cast<std::uint64_t>(n));
  const auto x = random_magnitudes(rng, rows * n, 0.05f, 2.0f, Fmt::bf16);
  const auto g = random_magnitudes(rng, n, 0.5f, 1.5f);
  std::vector<float> y_emu(x.size());
  emu::rms_norm(x.data(), rows, n, weighted ? g.data() : nullptr, 1e-6f, stats, out, y_emu.data());
  Dev<float> d_x(x), d_g(g), d_y(rows * n);
  hip::rms_norm(d_x.ptr(), rows, n, weighted ? d_g.ptr() : nullptr, 1e-6f, stats, out, d_y.ptr(), test_stream());
  const auto y = d_y.get();
  EXPECT_EQ(ulp_stats(y, y_emu, Fmt::f32).max_ulps, 0.0);
  std::vector<double> xd(x.begin(), x.end()), gd(g.begin(), g.end()), yr(x.size());
  if (weighted) refcpu::rms_norm(xd.data(), rows, n, gd.data(), 1e-6, yr.data());
  else refcpu::rms_unweighted(xd.data(), rows, n, 1e-6, yr.data());
  const Error e = error_vs(y, yr);
  EXPECT_LE(e.rel_l2, unit_ulp(out) + unit_ulp(stats)) << e.rel_l2;
  EXPECT_EQ(e.non_finite, 0);
}

TEST(RmsNorm, MatchesEmuAndReference) {
  for (Fmt stats : {Fmt::f32, Fmt::f16})
    for (bool weighted : {true, false}) {
      check(33, 200, weighted, stats, Fmt::bf16);
      check(5, 4096, weighted, stats, Fmt::bf16);
      check(64, 13, weighted, stats, Fmt::f16);
    }
}

}  // namespace
}  // namespace tdiff::gputest
