// covers: pool
// hip::gated_pool against emu::gated_pool (ulps of the storage format) and
// refcpu::gated_pool (float64), overlapping (CSA, μ = 4) and not (μ = 16), a left-padded
// row whose windows start at its first real token, windows past the row left zero.
#include <map>

#include "emu/compressor.h"
#include "emu/numerics.h"
#include "gpu_test.h"
#include "hip/compressor.h"
#include "refcpu/compressor.h"

namespace tdiff::gputest {
namespace {

struct PoolResult {
  UlpStats vs_emu;
  double err_hip = 0, err_emu = 0;
};

PoolResult run_pool(const Numerics& num, std::int64_t rate, bool overlap, std::mt19937_64& rng) {
  const std::int64_t B = 2, S = 67, width = 24, stride = (overlap ? 2 : 1) * width, n = S / rate;
  const std::vector<std::int64_t> start{0, 7}, length{67, 53};
  const auto st = emu::fmt_of(num.storage);
  auto P = random_values(rng, B * S * stride, -2.0f, 2.0f, st);
  auto Z = random_values(rng, B * S * stride, -3.0f, 3.0f, st);
  auto pb = random_values(rng, rate * stride, -1.0f, 1.0f, arith::Fmt::f32);
  const auto pbd = to_double(pb), Pd = to_double(P), Zd = to_double(Z);
  std::vector<float> out_emu(B * n * width, 0.0f);
  std::vector<double> out_ref(out_emu.size(), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t off = (b * S + start[b]) * stride;
    emu::gated_pool(P.data() + off, Z.data() + off, length[b], pbd.data(), rate, width, overlap, num,
                    out_emu.data() + b * n * width);
    refcpu::gated_pool(Pd.data() + off, Zd.data() + off, length[b], pbd.data(), rate, width, overlap,
                       out_ref.data() + b * n * width);
  }
  Dev<float> d_P(P), d_Z(Z), d_pb(pb);
  Dev<std::int64_t> d_start(start), d_length(length);
  Dev<float> d_out(out_emu.size());
  hip::gated_pool(d_P.ptr(), d_Z.ptr(), B, S, d_start.ptr(), d_length.ptr(), d_pb.ptr(), rate, width, overlap,
                  emu::pool_spec(num), d_out.ptr(), test_stream());
  const auto out_hip = d_out.get();
  return {ulp_stats(out_hip, out_emu, st), error_vs(out_hip, out_ref).scaled, error_vs(out_emu, out_ref).scaled};
}

TEST(HipGatedPool, MatchesEmuAndReferencePerKnob) {
  auto rng = test_rng();
  std::map<std::string, Numerics> settings;
  settings["fixed"] = Numerics{};
  settings["pool_softmax=bf16"].pool_softmax = DType::bf16;
  settings["pool_softmax=fp16"].pool_softmax = DType::f16;
  settings["storage=fp16"].storage = DType::f16;
  for (const auto& [rate, overlap] : {std::pair<std::int64_t, bool>{4, true}, {16, false}}) {
    std::map<std::string, PoolResult> results;
    for (const auto& [name, num] : settings) {
      auto draw = rng;  // the same inputs for every setting
      const PoolResult r = run_pool(num, rate, overlap, draw);
      results[name] = r;
      std::printf("pool rate=%ld overlap=%d %-18s vs emu: max %.0f ulp, %zu of %zu differ | vs refcpu: hip %.3e emu %.3e\n",
                  static_cast<long>(rate), overlap, name.c_str(), r.vs_emu.max_ulps, r.vs_emu.differ, r.vs_emu.count,
                  r.err_hip, r.err_emu);
      EXPECT_LE(r.vs_emu.max_ulps, 1.0) << name;
      EXPECT_LE(r.vs_emu.differ, r.vs_emu.count / 100) << name;
      EXPECT_NEAR(r.err_hip, r.err_emu, unit_ulp(emu::fmt_of(num.storage))) << name;
    }
    EXPECT_LE(results["fixed"].err_hip, 2 * unit_ulp(arith::Fmt::bf16));
    for (const auto& [name, r] : results)  // each knob moves the error the way emu says
      if (name != "fixed")
        EXPECT_EQ(r.err_hip > results["fixed"].err_hip, r.err_emu > results["fixed"].err_emu) << name;
  }
}

// CSA at v4-flash dimensions (S = 1024, μ = 4, overlapping, δ = 512): exact against emu, timed.
TEST(HipGatedPool, FlashDimsMatchEmu) {
  auto rng = test_rng();
  const std::int64_t S = 1024, rate = 4, width = 512, stride = 2 * width, n = S / rate;
  const Numerics num;
  auto P = random_values(rng, S * stride, -2.0f, 2.0f, arith::Fmt::bf16);
  auto Z = random_values(rng, S * stride, -3.0f, 3.0f, arith::Fmt::bf16);
  auto pb = random_values(rng, rate * stride, -1.0f, 1.0f, arith::Fmt::f32);
  const auto pbd = to_double(pb);
  std::vector<float> out_emu(n * width);
  emu::gated_pool(P.data(), Z.data(), S, pbd.data(), rate, width, true, num, out_emu.data());
  Dev<float> d_P(P), d_Z(Z), d_pb(pb);
  Dev<std::int64_t> d_start(std::vector<std::int64_t>{0}), d_length(std::vector<std::int64_t>{S});
  Dev<float> d_out(out_emu.size());
  const double ms = time_ms([&] {
    hip::gated_pool(d_P.ptr(), d_Z.ptr(), 1, S, d_start.ptr(), d_length.ptr(), d_pb.ptr(), rate, width, true,
                    emu::pool_spec(num), d_out.ptr(), test_stream());
  });
  const UlpStats u = ulp_stats(d_out.get(), out_emu, arith::Fmt::bf16);
  std::printf("pool S=1024 rate=4 width=512 overlap: %.3f ms, vs emu max %.0f ulp (%zu of %zu differ)\n", ms, u.max_ulps,
              u.differ, u.count);
  EXPECT_LE(u.max_ulps, 1.0);
}

}  // namespace
}  // namespace tdiff::gputest
