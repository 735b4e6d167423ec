// covers: hc_mix, hc_sinkhorn, hc_pre, hc_post, hc_head
// Hyper-connection kernels against emu (ulps of the output format) and refcpu (float64):
// hc_mix, hc_sinkhorn (20 iterations; comb's columns sum to 1), hc_pre, hc_post, hc_head,
// under fixed and each hyper-connection knob. N = 13 tokens, n = 4 streams, D = 96.
#include <map>

#include "emu/hyper_connection.h"
#include "emu/numerics.h"
#include "gpu_test.h"
#include "hip/hyper_connection.h"
#include "refcpu/hyper_connection.h"

namespace tdiff::gputest {
namespace {

constexpr std::int64_t kN = 13, kHc = 4, kD = 96, kFlat = kHc * kD, kM = (2 + kHc) * kHc, kIters = 20;
constexpr float kEps = 1e-6f, kHcEps = 1e-6f;

struct Inputs {
  std::vector<float> X, fn, base, scale, y, fn_head, base_head, scale_head;
};

Inputs make_inputs(std::mt19937_64& rng, const Numerics& num) {
  Inputs in;
  const auto sf = emu::fmt_of(num.stream), st = emu::fmt_of(num.storage), f32 = arith::Fmt::f32;
  in.X = random_values(rng, kN * kFlat, -2.0f, 2.0f, sf);
  in.fn = random_values(rng, kM * kFlat, -0.1f, 0.1f, f32);
  in.base = random_values(rng, kM, -1.0f, 1.0f, f32);
  in.scale = random_values(rng, 3, 0.5f, 2.0f, f32);
  in.y = random_values(rng, kN * kD, -2.0f, 2.0f, st);
  in.fn_head = random_values(rng, kHc * kFlat, -0.1f, 0.1f, f32);
  in.base_head = random_values(rng, kHc, -1.0f, 1.0f, f32);
  in.scale_head = random_values(rng, 1, 0.5f, 2.0f, f32);
  return in;
}

struct Check {
  std::string what;
  UlpStats u;
  double err_hip, err_emu;
  arith::Fmt f;  // the output's format
};

Check compare(const std::string& what, const std::vector<float>& hip, const std::vector<float>& emu,
              const std::vector<double>& ref, arith::Fmt f) {
  return {what, ulp_stats(hip, emu, f), error_vs(hip, ref).scaled, error_vs(emu, ref).scaled, f};
}

std::vector<Check> run_all(const Numerics& num, std::mt19937_64& rng, std::vector<float>* comb_out) {
  const Inputs in = make_inputs(rng, num);
  const auto sk = emu::fmt_of(num.sinkhorn), st = emu::fmt_of(num.storage), sf = emu::fmt_of(num.stream);
  const auto Xd = to_double(in.X), fnd = to_double(in.fn), based = to_double(in.base), scaled = to_double(in.scale);
  Dev<float> d_X(in.X), d_fn(in.fn), d_base(in.base), d_scale(in.scale), d_y(in.y);
  std::vector<Check> checks;

  // hc_mix
  std::vector<float> mix_emu(kN * kM);
  std::vector<double> mix_ref(mix_emu.size());
  emu::hc_mix(in.X.data(), kN, kFlat, fnd.data(), kM, kEps, num, mix_emu.data());
  refcpu::hc_mix(Xd.data(), kN, kFlat, fnd.data(), kM, kEps, mix_ref.data());
  Dev<float> d_mix(mix_emu.size());
  hip::hc_mix(d_X.ptr(), kN, kFlat, d_fn.ptr(), kM, kEps, emu::hc_spec(num), d_mix.ptr(), test_stream());
  checks.push_back(compare("hc_mix", d_mix.get(), mix_emu, mix_ref, sk));

  // hc_sinkhorn, on emu's mix for all three (the stage's input is the reference's)
  std::vector<float> pre_e(kN * kHc), post_e(pre_e.size()), comb_e(kN * kHc * kHc);
  std::vector<double> pre_r(pre_e.size()), post_r(pre_e.size()), comb_r(comb_e.size());
  emu::hc_sinkhorn(mix_emu.data(), kN, kHc, based.data(), scaled.data(), kHcEps, kIters, num, pre_e.data(),
                   post_e.data(), comb_e.data());
  const auto mixd = to_double(mix_emu);
  refcpu::hc_sinkhorn(mixd.data(), kN, kHc, based.data(), scaled.data(), kHcEps, kIters, pre_r.data(), post_r.data(),
                      comb_r.data());
  Dev<float> d_mix_in(mix_emu);
  Dev<float> d_pre(pre_e.size()), d_post(post_e.size()), d_comb(comb_e.size());
  hip::hc_sinkhorn(d_mix_in.ptr(), kN, kHc, d_base.ptr(), d_scale.ptr(), kHcEps, kIters,
                   emu::hc_spec(num), d_pre.ptr(), d_post.ptr(), d_comb.ptr(), test_stream());
  const auto comb_h = d_comb.get();
  checks.push_back(compare("hc_sinkhorn.pre", d_pre.get(), pre_e, pre_r, sk));
  checks.push_back(compare("hc_sinkhorn.post", d_post.get(), post_e, post_r, sk));
  checks.push_back(compare("hc_sinkhorn.comb", comb_h, comb_e, comb_r, sk));
  if (comb_out) *comb_out = comb_h;

  // hc_pre with emu's pre weights
  std::vector<float> x_e(kN * kD);
  std::vector<double> x_r(x_e.size());
  emu::hc_collapse(in.X.data(), pre_e.data(), kN, kHc, kD, st, x_e.data());
  const auto pred = to_double(pre_e);
  refcpu::hc_collapse(Xd.data(), pred.data(), kN, kHc, kD, x_r.data());
  Dev<float> d_w(pre_e);
  Dev<float> d_x(x_e.size());
  hip::hc_pre(d_X.ptr(), d_w.ptr(), kN, kHc, kD, st, d_x.ptr(), test_stream());
  checks.push_back(compare("hc_pre", d_x.get(), x_e, x_r, st));

  // hc_post with emu's post and comb
  std::vector<float> Xo_e(kN * kFlat);
  std::vector<double> Xo_r(Xo_e.size());
  emu::hc_post(in.X.data(), in.y.data(), post_e.data(), comb_e.data(), kN, kHc, kD, sf, Xo_e.data());
  const auto yd = to_double(in.y), postd = to_double(post_e), combd = to_double(comb_e);
  refcpu::hc_post(Xd.data(), yd.data(), postd.data(), combd.data(), kN, kHc, kD, Xo_r.data());
  Dev<float> d_post_in(post_e), d_comb_in(comb_e);
  Dev<float> d_Xo(Xo_e.size());
  hip::hc_post(d_X.ptr(), d_y.ptr(), d_post_in.ptr(), d_comb_in.ptr(), kN, kHc, kD, sf, d_Xo.ptr(), test_stream());
  checks.push_back(compare("hc_post", d_Xo.get(), Xo_e, Xo_r, sf));

  // hc_head
  const auto fnhd = to_double(in.fn_head), bhd = to_double(in.base_head), shd = to_double(in.scale_head);
  std::vector<float> preh_e(kN * kHc), yh_e(kN * kD);
  std::vector<double> preh_r(preh_e.size()), yh_r(yh_e.size());
  emu::hc_head_weights(in.X.data(), kN, kHc, kD, fnhd.data(), bhd.data(), shd.data(), kEps, kHcEps, num, preh_e.data());
  emu::hc_collapse(in.X.data(), preh_e.data(), kN, kHc, kD, st, yh_e.data());
  refcpu::hc_head_weights(Xd.data(), kN, kHc, kD, fnhd.data(), bhd.data(), shd.data(), kEps, kHcEps, preh_r.data());
  refcpu::hc_collapse(Xd.data(), preh_r.data(), kN, kHc, kD, yh_r.data());
  Dev<float> d_fnh(in.fn_head), d_bh(in.base_head), d_sh(in.scale_head);
  Dev<float> d_yh(yh_e.size()), d_preh(preh_e.size());
  hip::hc_head(d_X.ptr(), kN, kHc, kD, d_fnh.ptr(), d_bh.ptr(), d_sh.ptr(), kEps, kHcEps,
               emu::hc_spec(num), st, d_yh.ptr(), d_preh.ptr(), test_stream());
  checks.push_back(compare("hc_head.preh", d_preh.get(), preh_e, preh_r, sk));
  checks.push_back(compare("hc_head.y", d_yh.get(), yh_e, yh_r, st));
  return checks;
}

TEST(HipHyperConnection, MatchesEmuAndReferencePerKnob) {
  auto rng = test_rng();
  std::map<std::string, Numerics> settings;
  settings["fixed"] = Numerics{};
  settings["sinkhorn=bf16"].sinkhorn = DType::bf16;
  settings["sinkhorn=fp16"].sinkhorn = DType::f16;
  settings["hc_eps=off"].hc_eps = false;
  settings["norm_stats=bf16"].norm_stats = DType::bf16;
  settings["stream=bf16"].stream = DType::bf16;
  std::map<std::string, std::map<std::string, Check>> results;
  for (const auto& [name, num] : settings) {
    std::vector<float> comb;
    auto draw = rng;  // the same inputs for every setting
    for (const Check& c : run_all(num, draw, &comb)) {
      results[name].emplace(c.what, c);
      std::printf("%-17s %-16s vs emu: max %.0f ulp, %zu of %zu differ | vs refcpu: hip %.3e emu %.3e\n", name.c_str(),
                  c.what.c_str(), c.u.max_ulps, c.u.differ, c.u.count, c.err_hip, c.err_emu);
      // Sums and products in emu's order are bit-identical; the sigmoid/exp of the maps may
      // move a float32 rounding (device expf in double vs glibc) by one ulp of the format.
      EXPECT_LE(c.u.max_ulps, 1.0) << name << " " << c.what;
      EXPECT_NEAR(c.err_hip, c.err_emu, 2 * unit_ulp(c.f)) << name << " " << c.what;
    }
    if (name == "fixed")  // the last normalisation is over columns: each sums to 1
      for (std::int64_t t = 0; t < kN; ++t)
        for (std::int64_t u = 0; u < kHc; ++u) {
          double sum = 0;
          for (std::int64_t v = 0; v < kHc; ++v) sum += comb[(t * kHc + v) * kHc + u];
          EXPECT_NEAR(sum, 1.0, 1e-5) << "token " << t << " column " << u;
        }
  }
  // fixed: within a few bf16 ulps of each output's scale.
  for (const auto& [what, c] : results["fixed"]) EXPECT_LE(c.err_hip, 2 * unit_ulp(arith::Fmt::bf16)) << what;
  // The 16-bit Sinkhorn format costs accuracy in the maps, as emu says.
  for (const char* bad : {"sinkhorn=bf16", "sinkhorn=fp16"})
    for (const char* what : {"hc_mix", "hc_sinkhorn.comb", "hc_head.preh"}) {
      EXPECT_GT(results[bad].at(what).err_hip, results["fixed"].at(what).err_hip) << bad << " " << what;
      EXPECT_GT(results[bad].at(what).err_emu, results["fixed"].at(what).err_emu) << bad << " " << what;
    }
}

// hc_mix's awkward shapes, exact against emu: fn not 16-byte aligned (one float in); a flat
// width that is no multiple of 64 (n = 3 streams of 33) or below one wavefront's 64 lanes
// (8 x 7 = 56); token counts that leave the last workgroup part empty; M = 80 outputs (n = 8)
// in three passes of 32.
TEST(HipHyperConnection, MixAwkwardShapesMatchEmu) {
  auto rng = test_rng();
  struct Shape3 {
    std::int64_t N, n, D;
  };
  for (const Shape3 sh : {Shape3{7, 3, 33}, Shape3{5, 8, 7}, Shape3{1, 2, 64}}) {
    const std::int64_t N = sh.N, n = sh.n, D = sh.D, flat = n * D, M = (2 + n) * n;
    const Numerics num;
    auto X = random_values(rng, N * flat, -2.0f, 2.0f, arith::Fmt::f32);
    auto fn = random_values(rng, M * flat, -0.1f, 0.1f, arith::Fmt::f32);
    std::vector<float> mix(static_cast<std::size_t>(N * M));
    const auto fnd = to_double(fn);
    emu::hc_mix(X.data(), N, flat, fnd.data(), M, kEps, num, mix.data());
    std::vector<float> fn_shifted(1, 0.0f);
    fn_shifted.insert(fn_shifted.end(), fn.begin(), fn.end());
    Dev<float> d_X(X), d_fn(fn_shifted);
    Dev<float> d_mix(mix.size());
    hip::hc_mix(d_X.ptr(), N, flat, d_fn.ptr() + 1, M, kEps, emu::hc_spec(num), d_mix.ptr(), test_stream());
    const UlpStats u = ulp_stats(d_mix.get(), mix, arith::Fmt::f32);
    EXPECT_EQ(u.max_ulps, 0.0) << "N " << N << " n " << n << " D " << D;
  }
}

// v4-flash dimensions (1024 tokens, D = 4096, n = 4): each kernel on emu's inputs of its stage
// (as the stage runs on the reference's), within one ulp of emu and 1% of elements; timed.
TEST(HipHyperConnection, FlashDimsMatchEmu) {
  auto rng = test_rng();
  const std::int64_t N = 1024, n = 4, D = 4096, flat = n * D, M = (2 + n) * n;
  const Numerics num;
  auto X = random_values(rng, N * flat, -2.0f, 2.0f, arith::Fmt::f32);
  auto fn = random_values(rng, M * flat, -0.02f, 0.02f, arith::Fmt::f32);
  auto base = random_values(rng, M, -1.0f, 1.0f, arith::Fmt::f32);
  auto scale = random_values(rng, 3, 0.5f, 2.0f, arith::Fmt::f32);
  auto y = random_values(rng, N * D, -2.0f, 2.0f, arith::Fmt::bf16);
  const auto fnd = to_double(fn), based = to_double(base), scaled = to_double(scale);
  std::vector<float> mix(N * M), pre(N * n), post(N * n), comb(N * n * n), x(N * D), Xo(N * flat);
  emu::hc_mix(X.data(), N, flat, fnd.data(), M, kEps, num, mix.data());
  emu::hc_sinkhorn(mix.data(), N, n, based.data(), scaled.data(), kHcEps, kIters, num, pre.data(), post.data(),
                   comb.data());
  emu::hc_collapse(X.data(), pre.data(), N, n, D, arith::Fmt::bf16, x.data());
  emu::hc_post(X.data(), y.data(), post.data(), comb.data(), N, n, D, arith::Fmt::f32, Xo.data());
  Dev<float> d_X(X), d_fn(fn), d_base(base), d_scale(scale), d_y(y);
  Dev<float> e_mix(mix), e_pre(pre), e_post(post), e_comb(comb);  // emu's stage inputs
  Dev<float> d_mix(mix.size()), d_pre(pre.size()), d_post(post.size()), d_comb(comb.size()),
      d_x(x.size()), d_Xo(Xo.size());
  const double ms_mix =
      time_ms([&] { hip::hc_mix(d_X.ptr(), N, flat, d_fn.ptr(), M, kEps, emu::hc_spec(num), d_mix.ptr(), test_stream()); });
  const double ms_sk = time_ms([&] {
    hip::hc_sinkhorn(e_mix.ptr(), N, n, d_base.ptr(), d_scale.ptr(), kHcEps, kIters,
                     emu::hc_spec(num), d_pre.ptr(), d_post.ptr(), d_comb.ptr(), test_stream());
  });
  const double ms_pre =
      time_ms([&] { hip::hc_pre(d_X.ptr(), e_pre.ptr(), N, n, D, arith::Fmt::bf16, d_x.ptr(), test_stream()); });
  const double ms_post = time_ms([&] {
    hip::hc_post(d_X.ptr(), d_y.ptr(), e_post.ptr(), e_comb.ptr(), N, n, D, arith::Fmt::f32, d_Xo.ptr(), test_stream());
  });
  std::printf("hc N=1024 D=4096: mix %.3f ms, sinkhorn %.3f ms, pre %.3f ms, post %.3f ms\n", ms_mix, ms_sk, ms_pre,
              ms_post);
  const std::pair<const char*, UlpStats> checks[] = {
      {"mix", ulp_stats(d_mix.get(), mix, arith::Fmt::f32)},
      {"comb", ulp_stats(d_comb.get(), comb, arith::Fmt::f32)},
      {"pre", ulp_stats(d_pre.get(), pre, arith::Fmt::f32)},
      {"post", ulp_stats(d_post.get(), post, arith::Fmt::f32)},
      {"x", ulp_stats(d_x.get(), x, arith::Fmt::bf16)},
      {"Xout", ulp_stats(d_Xo.get(), Xo, arith::Fmt::f32)}};
  for (const auto& [what, u] : checks) {
    std::printf("  %-5s vs emu: max %.0f ulp, %zu of %zu differ\n", what, u.max_ulps, u.differ, u.count);
    EXPECT_LE(u.max_ulps, 1.0) << what;
    EXPECT_LE(u.differ, u.count / 100) << what;
  }
}

// The kernels' exp (arith::expf_glibc, what exp_f32 runs on the device) against this host's
// std::exp(float) on every 37th float of the range the algorithm handles and the edges; a
// host check, it needs no GPU (run it alone with --gtest_filter=ArithExp.*).
TEST(ArithExp, DeviceExpMatchesHostExpf) {
  std::size_t checked = 0, differ = 0;
  auto check = [&](float x) {
    ++checked;
    differ += arith::float_bits(arith::expf_glibc(x)) != arith::float_bits(std::exp(x));
  };
  for (std::uint32_t u = 0; u < 0x42b20000u; u += 37) check(arith::bits_float(u));            // +0 .. +89
  for (std::uint32_t u = 0x80000000u; u < 0xc2d00000u; u += 37) check(arith::bits_float(u));  // −0 .. −104
  for (float x : {0.0f, -0.0f, 88.72f, 89.0f, -103.9f, -104.0f, INFINITY, -INFINITY}) check(x);
  std::printf("expf_glibc vs std::exp: %zu of %zu inputs differ\n", differ, checked);
  EXPECT_EQ(differ, 0u);
}
}  // namespace
}  // namespace tdiff::gputest
