// covers: attention
// hip::attention against emu::flash_attention_row (same rounded inputs: ulps of the storage
// format) and refcpu::attention_row (float64: error relative to the output's scale), for the
// fixed policy, each attention knob on its own and the naive preset's formats (each of the
// kernel's compile-time format combinations and the run-time one). Awkward sizes: S = 130 (three 64-key
// blocks, the last partial), n = 37 compressed entries, d = 72 (two LDS chunks, the second
// partial), a padded row, queries that see no key at all. The matrix-core kernel (16-bit
// storage, float accumulators) on the same cases, and v4-flash dimensions timed both ways.
#include <map>

#include "emu/attention.h"
#include "emu/numerics.h"
#include "gpu_test.h"
#include "hip/attention.h"
#include "hip/gemm.h"
#include "refcpu/attention.h"

namespace tdiff::gputest {
namespace {

struct AttnCase {
  std::int64_t B = 2, S = 130, n = 37, H = 3, d = 72, window = 48;
  std::vector<std::int64_t> length{130, 100};  // row 1: 30 padding tokens at the end
};

struct AttnResult {
  UlpStats vs_emu;
  double err_hip = 0, err_emu = 0;  // relative to refcpu
};

// matrix_cores: the matrix-core form (keys as 16-bit patterns, as the backend passes them).
AttnResult run_attention(const Numerics& num, std::mt19937_64& rng, const AttnCase& c = {}, bool matrix_cores = false) {
  const auto st = emu::fmt_of(num.storage);
  auto q = random_values(rng, c.B * c.S * c.H * c.d, -2.0f, 2.0f, st);
  auto kv = random_values(rng, c.B * c.S * c.d, -2.0f, 2.0f, st);
  auto C = random_values(rng, c.B * c.n * c.d, -2.0f, 2.0f, st);
  auto sinks = random_values(rng, c.H, -1.0f, 2.0f, arith::Fmt::f32);
  for (auto* v : {&q, &kv, &C})
    for (float& x : *v) x = arith::mfma_operand(x, st);
  std::vector<std::uint8_t> win(c.B * c.S * c.S), cmask(c.B * c.S * c.n);
  std::bernoulli_distribution keep(0.7);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t i = 0; i < c.S; ++i) {
      for (std::int64_t j = 0; j < c.S; ++j)
        win[(b * c.S + i) * c.S + j] = i - c.window < j && j <= i && j < c.length[b];
      for (std::int64_t e = 0; e < c.n; ++e)
        cmask[(b * c.S + i) * c.n + e] = (e + 1) * 4 <= i + 1 && i < c.length[b] && keep(rng);
    }

  const std::size_t out_n = c.B * c.S * c.H * c.d;
  std::vector<float> o_emu(out_n);
  std::vector<double> o_ref(out_n);
  const auto qd = to_double(q), kvd = to_double(kv), Cd = to_double(C), sd = to_double(sinks);
  for (std::int64_t b = 0; b < c.B; ++b) {
    emu::flash_attention_row(q.data() + b * c.S * c.H * c.d, kv.data() + b * c.S * c.d, win.data() + b * c.S * c.S,
                             C.data() + b * c.n * c.d, cmask.data() + b * c.S * c.n, c.S, c.S, c.n, c.H, c.d, sinks.data(),
                             num, o_emu.data() + b * c.S * c.H * c.d);
    refcpu::attention_row(qd.data() + b * c.S * c.H * c.d, kvd.data() + b * c.S * c.d, win.data() + b * c.S * c.S,
                          Cd.data() + b * c.n * c.d, cmask.data() + b * c.S * c.n, c.S, c.S, c.n, c.H, c.d, sd.data(),
                          o_ref.data() + b * c.S * c.H * c.d);
  }

  Dev<float> d_q(q), d_kv(kv), d_C(C), d_sinks(sinks);
  Dev<std::uint8_t> d_win(win), d_cmask(cmask);
  Dev<float> d_o(out_n);
  hip::DeviceBuffer kv16(std::max<std::size_t>(kv.size(), 1) * 2), C16(std::max<std::size_t>(C.size(), 1) * 2);
  if (matrix_cores) {
    hip::quantize_activations_bits16(d_kv.ptr(), kv16.as<std::uint16_t>(), c.B * c.S * c.d, st, test_stream());
    hip::quantize_activations_bits16(d_C.ptr(), C16.as<std::uint16_t>(), c.B * c.n * c.d, st, test_stream());
  }
  hip::attention(d_q.ptr(), d_kv.ptr(), d_win.ptr(), d_C.ptr(), d_cmask.ptr(), c.B, c.S, c.n, c.H, c.d, d_sinks.ptr(),
                 emu::attention_spec(num, c.d), d_o.ptr(), test_stream(),
                 matrix_cores ? kv16.as<std::uint16_t>() : nullptr, matrix_cores ? C16.as<std::uint16_t>() : nullptr);
  const auto o_hip = d_o.get();
  return {ulp_stats(o_hip, o_emu, st), error_vs(o_hip, o_ref).scaled, error_vs(o_emu, o_ref).scaled};
}

std::map<std::string, Numerics> attention_settings() {
  std::map<std::string, Numerics> m;
  m["fixed"] = Numerics{};
  auto with = [&](const char* name, auto set) {
    Numerics n;
    set(n);
    m[name] = n;
  };
  with("softmax_stats=fp16", [](Numerics& n) { n.softmax_stats = DType::f16; });
  with("softmax_stats=bf16", [](Numerics& n) { n.softmax_stats = DType::bf16; });
  with("qk_accum=fp16", [](Numerics& n) { n.qk_accum = DType::f16; });
  with("qk_accum=bf16", [](Numerics& n) { n.qk_accum = DType::bf16; });
  with("pv_accum=bf16", [](Numerics& n) { n.pv_accum = DType::bf16; });
  with("mask_style=additive", [](Numerics& n) { n.mask_style = MaskStyle::additive; });
  with("rescale_order=per_block", [](Numerics& n) { n.rescale_order = RescaleOrder::per_block; });
  with("storage=fp16", [](Numerics& n) { n.storage = DType::f16; });
  with("storage=fp16+additive", [](Numerics& n) { n.storage = DType::f16, n.mask_style = MaskStyle::additive; });
  with("storage=fp32", [](Numerics& n) { n.storage = DType::f32; });
  with("naive formats (fp16 x3)", [](Numerics& n) { n.storage = n.qk_accum = n.pv_accum = DType::f16; });
  return m;
}

TEST(HipAttention, MatchesEmuAndReferencePerKnob) {
  auto rng = test_rng();
  std::map<std::string, AttnResult> results;
  for (const auto& [name, num] : attention_settings()) {
    auto draw = rng;  // the same inputs for every setting
    const AttnResult r = run_attention(num, draw);
    results[name] = r;
    std::printf("attention %-26s vs emu: max %.0f ulp, %zu of %zu differ, max diff %.2e of scale | vs refcpu: hip %.3e emu %.3e\n",
                name.c_str(), r.vs_emu.max_ulps, r.vs_emu.differ, r.vs_emu.count, r.vs_emu.scaled, r.err_hip, r.err_emu);
    const auto st = emu::fmt_of(num.storage);
    // emu is the spec. The kernels' exp is glibc's expf algorithm (arith::expf_glibc), so the
    // outputs are expected bit-identical; the bounds allow what the spec tolerates should a
    // host's expf differ: one ulp of a 16-bit storage format, and with fp32 storage (P stays
    // float32, so an expf rounding shows) a few float32 ulps of the output's scale.
    if (st == arith::Fmt::f32) {
      EXPECT_LE(r.vs_emu.scaled, 8 * unit_ulp(st)) << name;
    } else {
      EXPECT_LE(r.vs_emu.max_ulps, 1.0) << name;
    }
    EXPECT_LE(r.vs_emu.differ, r.vs_emu.count / 100) << name;
    EXPECT_NEAR(r.err_hip, r.err_emu, unit_ulp(st)) << name;
  }
  // fixed: within a few bf16 ulps of the output's scale.
  EXPECT_LE(results["fixed"].err_hip, 2 * unit_ulp(arith::Fmt::bf16));
  // Each knob moves the error against the reference the way emu says it does.
  for (const auto& [name, r] : results)
    if (name != "fixed")
      EXPECT_EQ(r.err_hip > results["fixed"].err_hip, r.err_emu > results["fixed"].err_emu) << name;
  // and on these inputs the 16-bit accumulators and statistics do cost accuracy.
  for (const char* bad : {"qk_accum=fp16", "qk_accum=bf16", "pv_accum=bf16"})
    EXPECT_GT(results[bad].err_hip, results["fixed"].err_hip) << bad;
}

// Head groups: d = 520 (the widest register layout, a partial last LDS chunk) with H = 5
// (workgroups of 8 heads, 3 idle slots), H = 20 with d = 72 (16 heads per workgroup, the
// second with 12 idle slots) and H = 64 with d = 130 (four full groups of 16, d not a multiple
// of 4), under fixed and FA1 + additive.
TEST(HipAttention, WideHeadsAndHeadGroups) {
  auto rng = test_rng();
  Numerics fa1;
  fa1.rescale_order = RescaleOrder::per_block, fa1.mask_style = MaskStyle::additive;
  for (auto [H, d] : {std::pair<std::int64_t, std::int64_t>{5, 520}, {20, 72}, {64, 130}}) {
    AttnCase c;
    c.B = 1, c.S = 70, c.n = 5, c.H = H, c.d = d, c.length = {70};
    for (const Numerics& num : {Numerics{}, fa1}) {
      auto draw = rng;
      const AttnResult r = run_attention(num, draw, c);
      std::printf("attention d=%ld H=%ld %s vs emu: max %.0f ulp, %zu of %zu differ | vs refcpu: hip %.3e emu %.3e\n",
                  static_cast<long>(d), static_cast<long>(H), num == fa1 ? "per_block+additive" : "fixed",
                  r.vs_emu.max_ulps, r.vs_emu.differ, r.vs_emu.count, r.err_hip, r.err_emu);
      EXPECT_LE(r.vs_emu.max_ulps, 1.0) << "H=" << H << " d=" << d;
      EXPECT_LE(r.vs_emu.differ, r.vs_emu.count / 100) << "H=" << H << " d=" << d;
      EXPECT_NEAR(r.err_hip, r.err_emu, unit_ulp(arith::Fmt::bf16));
    }
  }
}

// The matrix-core kernel, for every setting it takes (16-bit storage, float32 qk_accum and
// pv_accum): the logits' float sums run in the hardware's order, so a logit may differ from
// emu's by a float rounding, and a P or output by one ulp of the storage format next to a
// rounding boundary (many of its own ulps where an output nearly cancels to 0): at most 2
// ulps of the format at the output's scale, in at most 2% of the outputs, and the error
// against refcpu within one ulp of emu's. Awkward sizes: the per-knob case (d = 72: padded to 80),
// d = 520 (a partial 16-channel tile) with 5 heads, 20 heads (a second, mostly idle group of
// 16), and 64 heads with d = 130 (rows not in whole 16-byte runs).
TEST(HipAttention, MatrixCoresAgainstEmu) {
  if (!hip::has_matrix_cores(device_arch())) GTEST_SKIP() << "no matrix cores on " << device_arch();
  auto rng = test_rng();
  std::vector<std::pair<std::string, AttnCase>> cases{{"per-knob case", AttnCase{}}};
  for (auto [H, d] : {std::pair<std::int64_t, std::int64_t>{5, 520}, {20, 72}, {64, 130}}) {
    AttnCase c;
    c.B = 1, c.S = 70, c.n = 5, c.H = H, c.d = d, c.length = {70};
    cases.emplace_back("H=" + std::to_string(H) + " d=" + std::to_string(d), c);
  }
  int ran = 0;
  for (const auto& [label, c] : cases)
    for (const auto& [name, num] : attention_settings()) {
      if (!hip::attention_on_matrix_cores(emu::attention_spec(num, 1), true)) continue;
      auto draw = rng;
      const AttnResult r = run_attention(num, draw, c, true);
      ++ran;
      const auto st = emu::fmt_of(num.storage);
      std::printf("attention (matrix cores) %-14s %-26s vs emu: max diff %.2f ulps at the scale, %zu of %zu differ | "
                  "vs refcpu: hip %.3e emu %.3e\n", label.c_str(), name.c_str(), r.vs_emu.scaled / unit_ulp(st),
                  r.vs_emu.differ, r.vs_emu.count, r.err_hip, r.err_emu);
      EXPECT_LE(r.vs_emu.scaled, 2 * unit_ulp(st)) << label << " " << name;
      EXPECT_LE(r.vs_emu.differ, r.vs_emu.count / 50) << label << " " << name;
      EXPECT_NEAR(r.err_hip, r.err_emu, unit_ulp(st)) << label << " " << name;
    }
  EXPECT_GE(ran, 4 * 6) << "the settings the matrix-core kernel takes: fixed and five knobs";
}

// v4-flash dimensions (S = 1024, H = 64, d = 512, window 128, n = 256 entries of which the
// causal ones are visible): every output finite, and the time printed for the record, on the
// vector ALU and (where the device has them) on the matrix cores, whose outputs must then
// agree with the former's as in MatrixCoresAgainstEmu.
TEST(HipAttention, FlashDimsRunsAndIsFinite) {
  auto rng = test_rng();
  const std::int64_t S = 1024, H = 64, d = 512, n = 256, window = 128;
  const Numerics num;
  auto q = random_values(rng, S * H * d, -2.0f, 2.0f, arith::Fmt::bf16);
  auto kv = random_values(rng, S * d, -2.0f, 2.0f, arith::Fmt::bf16);
  auto C = random_values(rng, n * d, -2.0f, 2.0f, arith::Fmt::bf16);
  auto sinks = random_values(rng, H, -1.0f, 2.0f, arith::Fmt::f32);
  std::vector<std::uint8_t> win(S * S), cmask(S * n);
  for (std::int64_t i = 0; i < S; ++i) {
    for (std::int64_t j = 0; j < S; ++j) win[i * S + j] = i - window < j && j <= i;
    for (std::int64_t e = 0; e < n; ++e) cmask[i * n + e] = (e + 1) * 4 <= i + 1;
  }
  Dev<float> d_q(q), d_kv(kv), d_C(C), d_sinks(sinks);
  Dev<std::uint8_t> d_win(win), d_cmask(cmask);
  Dev<float> d_o(S * H * d), d_o_mma(S * H * d);
  auto launch = [&] {
    hip::attention(d_q.ptr(), d_kv.ptr(), d_win.ptr(), d_C.ptr(), d_cmask.ptr(), 1, S, n, H, d, d_sinks.ptr(),
                   emu::attention_spec(num, d), d_o.ptr(), test_stream());
  };
  const double ms = time_ms(launch);
  std::printf("attention S=%ld H=%ld d=%ld n=%ld window=%ld: %.3f ms (vector ALU)\n", static_cast<long>(S),
              static_cast<long>(H), static_cast<long>(d), static_cast<long>(n), static_cast<long>(window), ms);
  const auto o = d_o.get();
  std::size_t bad = 0;
  for (float x : o) bad += !std::isfinite(x);
  EXPECT_EQ(bad, 0u);
  if (!hip::has_matrix_cores(device_arch())) return;
  hip::DeviceBuffer kv16(kv.size() * 2), C16(C.size() * 2);
  hip::quantize_activations_bits16(d_kv.ptr(), kv16.as<std::uint16_t>(), S * d, arith::Fmt::bf16, test_stream());
  hip::quantize_activations_bits16(d_C.ptr(), C16.as<std::uint16_t>(), n * d, arith::Fmt::bf16, test_stream());
  auto launch_mma = [&] {
    hip::attention(d_q.ptr(), d_kv.ptr(), d_win.ptr(), d_C.ptr(), d_cmask.ptr(), 1, S, n, H, d, d_sinks.ptr(),
                   emu::attention_spec(num, d), d_o_mma.ptr(), test_stream(), kv16.as<std::uint16_t>(),
                   C16.as<std::uint16_t>());
  };
  const double ms_mma = time_ms(launch_mma);
  const UlpStats u = ulp_stats(d_o_mma.get(), o, arith::Fmt::bf16);
  std::printf("attention S=%ld H=%ld d=%ld: %.3f ms on the matrix cores (%.2fx); vs the vector ALU: max diff %.2f "
              "bf16 ulps at the scale, %zu of %zu differ\n", static_cast<long>(S), static_cast<long>(H),
              static_cast<long>(d), ms_mma, ms / ms_mma, u.scaled / unit_ulp(arith::Fmt::bf16), u.differ, u.count);
  EXPECT_LE(u.scaled, 2 * unit_ulp(arith::Fmt::bf16));
  EXPECT_LE(u.differ, u.count / 50);
}

}  // namespace
}  // namespace tdiff::gputest
