// covers: linear, cmp_proj, grouped_linear, lm_head
// hip::gemm against emu::gemm (bit-identical in fixed mode on the vector ALU; on the matrix
// cores within one ulp of the output format plus the float reordering of the 16-deep
// products, and bit-identical between float32 operands and their 16-bit patterns, which
// take the pipelined kernel; in atomic
// mode within the rounding of the split-K adds) and against
// refcpu::linear in float64 (error within the operand format's budget), on awkward shapes;
// grouped and gathered forms against per-group emu products; release FP8 / FP4 weights
// decoded inside the matrix-core kernels against the same GEMMs of the weights dequantised
// first, bit for bit.
#include "formats/release_format.h"
#include "emu/gemm.h"
#include "gpu_test.h"
#include "hip/gemm.h"
#include "refcpu/linear.h"

namespace tdiff::gputest {
namespace {

struct Case {
  Fmt in, acc;
  bool atomic;
  bool matrix_cores = false;
};

// The matrix-core result against emu's: the float sums differ only in the order inside each
// 16-deep product (a few float roundings of Σ|x·w|), and the stored value by at most one
// rounding of the output format on top.
bool within_mma(float y, float e, double mag, std::int64_t K, Fmt out) {
  const double d = std::fabs(double(y) - e);
  return d <= unit_ulp(out) * std::max(std::fabs(double(y)), std::fabs(double(e))) +
                  2.0 * (double(K) / 16 + 2) * std::ldexp(1.0, -24) * mag;
}

std::string fmt_name(Fmt f) { return f == Fmt::f32 ? "f32" : f == Fmt::bf16 ? "bf16" : f == Fmt::f16 ? "f16" : "f8"; }

void check_dense(std::int64_t M, std::int64_t K, std::int64_t O, const Case& c) {
  SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " O=" + std::to_string(O) + " in=" + fmt_name(c.in) +
               " acc=" + fmt_name(c.acc) + (c.atomic ? " atomic" : " fixed") + (c.matrix_cores ? " matrix cores" : ""));
  auto rng = test_rng(static_cast<std::uint64_t>(M * 1000003 + K * 1009 + O));
  const auto x = random_magnitudes(rng, M * K, 0.05f, 1.0f, Fmt::bf16);
  const auto w = random_magnitudes(rng, O * K, 0.05f, 1.0f, Fmt::f32);
  const Fmt out = Fmt::bf16;
  // emu: quantize as the backend does, then the product.
  std::vector<double> wd(w.begin(), w.end());
  const auto wq = emu::quantize_weight(wd.data(), O, K, c.in);
  auto xq = x;
  emu::quantize_activations(xq, M, K, c.in);
  std::vector<float> y_emu(static_cast<std::size_t>(M * O));
  emu::gemm(xq.data(), M, K, wq.data(), O, emu::GemmSpec{c.in, c.acc, out, false, 0}, y_emu.data());

  Dev<float> d_x(x), d_xq(M * K), d_w(w), d_y(M * O);
  hip::quantize_activations(d_x.ptr(), d_xq.ptr(), M, K, 0, c.in, test_stream());
  hip::quantize_weight(d_w.ptr(), O, K, c.in, test_stream());
  hip::gemm(c.in == Fmt::f32 ? d_x.ptr() : d_xq.ptr(), K, d_w.ptr(), d_y.ptr(), O, M, K, O,
            hip::GemmSpec{c.in, c.acc, out, c.atomic, c.matrix_cores}, test_stream());
  const auto y = d_y.get();
  EXPECT_EQ(d_w.get(), wq) << "weight quantization differs from emu";
  if (c.in != Fmt::f32) {
    EXPECT_EQ(d_xq.get(), xq) << "activation quantization differs from emu";
  }
  auto mag_of = [&](std::int64_t m, std::int64_t o) {
    double mag = 0;
    for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(double(xq[m * K + k]) * wq[o * K + k]);
    return mag;
  };
  const bool on_matrix_cores = c.matrix_cores && (c.in == Fmt::bf16 || c.in == Fmt::f16) && c.acc == Fmt::f32;
  if (!c.atomic && !on_matrix_cores) {
    EXPECT_EQ(ulp_stats(y, y_emu, Fmt::f32).max_ulps, 0.0) << "fixed reduction must equal emu bit for bit";
  } else if (!c.atomic) {
    // The same product with the weight as 16-bit patterns (how the backend holds GEMM weights
    // on the matrix-core path): only the load differs, so the bits must not.
    Dev<std::uint16_t> d_w16(O * K);
    hip::pack_bits16(d_w.ptr(), d_w16.ptr(), O * K, c.in, test_stream());
    Dev<float> d_y16(M * O);
    hip::gemm(d_xq.ptr(), K, hip::GemmWeight(d_w16.ptr()), d_y16.ptr(), O, M, K, O,
              hip::GemmSpec{c.in, c.acc, out, false, true}, test_stream());
    EXPECT_EQ(d_y16.get(), y) << "16-bit weight patterns give other bits than float32 weights";
    // Both operands as 16-bit patterns (how the backend feeds the matrix cores): the
    // pipelined kernel where rows are whole 16-byte chunks, the same 16-deep products in the
    // same order, so again the same bits.
    Dev<std::uint16_t> d_x16(M * K), d_xq16(M * K);
    hip::quantize_activations_bits16(d_x.ptr(), d_x16.ptr(), M * K, c.in, test_stream());
    hip::pack_bits16(d_xq.ptr(), d_xq16.ptr(), M * K, c.in, test_stream());
    EXPECT_EQ(d_x16.get(), d_xq16.get()) << "quantize_activations_bits16 differs from quantize_activations + pack_bits16";
    Dev<float> d_y16x(M * O);
    hip::gemm(hip::GemmInput(d_x16.ptr()), K, hip::GemmWeight(d_w16.ptr()), d_y16x.ptr(), O, M, K, O,
              hip::GemmSpec{c.in, c.acc, out, false, true}, test_stream());
    EXPECT_EQ(d_y16x.get(), y) << "16-bit activation and weight patterns give other bits than float32 operands";
    // Every tile height and stage depth of the pipelined kernel: the same products in the
    // same k order, so the same bits.
    for (int rows : {32, 64, 128})
      for (int k : {32, 64}) {
        hip::GemmGroups tile;
        tile.tile_rows = rows, tile.tile_k = k;
        Dev<float> d_yt(M * O);
        hip::gemm(hip::GemmInput(d_x16.ptr()), K, hip::GemmWeight(d_w16.ptr()), d_yt.ptr(), O, M, K, O,
                  hip::GemmSpec{c.in, c.acc, out, false, true}, test_stream(), tile);
        EXPECT_EQ(d_yt.get(), y) << rows << "-row tiles, " << k << "-deep stages give other bits";
      }
    std::int64_t same = 0;
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t o = 0; o < O; ++o) {
        same += y[m * O + o] == y_emu[m * O + o];
        ASSERT_TRUE(within_mma(y[m * O + o], y_emu[m * O + o], mag_of(m, o), K, out))
            << m << "," << o << ": " << y[m * O + o] << " vs emu " << y_emu[m * O + o];
      }
    std::printf("matrix cores %s M=%lld K=%lld O=%lld: %.4f%% of outputs equal emu's bits\n", fmt_name(c.in).c_str(),
                static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(O), 100.0 * same / double(M * O));
  } else {
    // Four partials, each rounded to bf16 and added in arrival order with a bf16 rounding per
    // add: within 8 bf16 roundings of Σ|x·w| of the fixed-order emu result.
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t o = 0; o < O; ++o)
        ASSERT_LE(std::fabs(double(y[m * O + o]) - y_emu[m * O + o]), 4 * unit_ulp(out) * mag_of(m, o)) << m << "," << o;
  }
  // Against the float64 product of the unrounded inputs: the operand rounding dominates.
  std::vector<double> xd(x.begin(), x.end()), yr(static_cast<std::size_t>(M * O));
  refcpu::linear(xd.data(), M, K, wd.data(), O, yr.data());
  const Error e = error_vs(y, yr);
  const double budget = 2 * (unit_ulp(c.in) + unit_ulp(out) + (c.acc == Fmt::f16 ? unit_ulp(Fmt::f16) * std::sqrt(double(K)) : 0));
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LE(e.rel_l2, budget) << "rel_l2 " << e.rel_l2;
}

TEST(Gemm, FixedAllFormatsAwkwardShapes) {
  for (Fmt in : {Fmt::f32, Fmt::bf16, Fmt::f16, Fmt::f8})
    for (Fmt acc : {Fmt::f32, Fmt::f16}) {
      check_dense(99, 200, 77, {in, acc, false});
      check_dense(1, 33, 5, {in, acc, false});
    }
  check_dense(130, 384, 260, {Fmt::f8, Fmt::f32, false});  // several 128x128 weight blocks
  // Rows 16-byte aligned (K % 4 == 0): operands staged as float4, both tile shapes.
  check_dense(300, 1000, 520, {Fmt::f32, Fmt::f32, false});
  check_dense(130, 384, 260, {Fmt::bf16, Fmt::f32, false});
  check_dense(40, 512, 200, {Fmt::f32, Fmt::f32, false});
}

// The fp16 accumulator's paired rounding (the hardware's conversion on NVIDIA) against the
// software rule on every float bit pattern: inf, NaN, overflow, subnormals, ties.
TEST(Gemm, Fp16AccumulatorRoundingOnEveryFloat) { EXPECT_EQ(hip::round_f16_pair_mismatches(test_stream()), 0u); }

// The matrix-core path: 16-bit operands, float accumulator; awkward shapes (partial tiles,
// K not a multiple of 16 or 32) and a large one (several workgroups each way, long K).
TEST(Gemm, MatrixCoresAgainstEmu) {
  if (!hip::has_matrix_cores(device_arch())) GTEST_SKIP() << "no matrix cores on " << device_arch();
  for (Fmt in : {Fmt::bf16, Fmt::f16}) {
    check_dense(99, 200, 77, {in, Fmt::f32, false, true});
    check_dense(1, 33, 5, {in, Fmt::f32, false, true});
    check_dense(300, 1000, 520, {in, Fmt::f32, false, true});
    check_dense(40, 776, 130, {in, Fmt::f32, false, true});  // K % 32 = 8: a partial last block
  }
  check_dense(256, 4096, 384, {Fmt::bf16, Fmt::f32, false, true});  // 128 blocks through the pipeline
  // Combinations the matrix cores do not take fall back to the vector ALU, bit for bit.
  check_dense(99, 200, 77, {Fmt::bf16, Fmt::f16, false, true});
  check_dense(99, 200, 77, {Fmt::f8, Fmt::f32, false, true});
  check_dense(70, 300, 65, {Fmt::bf16, Fmt::f32, true, true});
}

// An SGEMM of bf16 numbers (float32 operands that all are bf16 values, float accumulator) on
// the matrix cores, as the backend runs fixed's lm_head and router on a bf16 checkpoint: the
// products are exact either way, so the result is emu's SGEMM up to the float summation order
// (the matrix-core bound, in float32 ulps). mark_inexact_operands tells bf16 numbers apart.
TEST(Gemm, SgemmOfBf16NumbersOnMatrixCores) {
  if (!hip::has_matrix_cores(device_arch())) GTEST_SKIP() << "no matrix cores on " << device_arch();
  for (const auto& [M, K, O] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{200, 1000, 300}, {37, 4096, 130}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " O=" + std::to_string(O));
    auto rng = test_rng(static_cast<std::uint64_t>(K));
    const auto x = random_magnitudes(rng, M * K, 0.05f, 1.0f, Fmt::bf16);
    auto w = random_magnitudes(rng, O * K, 0.05f, 4.0f, Fmt::bf16);
    std::vector<float> y_emu(static_cast<std::size_t>(M * O));
    emu::gemm(x.data(), M, K, w.data(), O, emu::GemmSpec{Fmt::f32, Fmt::f32, Fmt::f32, false, 0}, y_emu.data());

    Dev<float> d_x(x), d_w(w), d_y(M * O);
    Dev<int> d_flag(std::vector<int>{0});
    hip::mark_inexact_operands(d_w.ptr(), O * K, Fmt::bf16, d_flag.ptr(), test_stream());
    EXPECT_EQ(d_flag.get().at(0), 0) << "bf16 numbers reported inexact";
    Dev<std::uint16_t> d_x16(M * K), d_w16(O * K);
    hip::pack_bits16(d_x.ptr(), d_x16.ptr(), M * K, Fmt::bf16, test_stream());
    hip::pack_bits16(d_w.ptr(), d_w16.ptr(), O * K, Fmt::bf16, test_stream());
    hip::gemm(hip::GemmInput(d_x16.ptr()), K, hip::GemmWeight(d_w16.ptr()), d_y.ptr(), O, M, K, O,
              hip::GemmSpec{Fmt::bf16, Fmt::f32, Fmt::f32, false, true}, test_stream());
    const auto y = d_y.get();
    double worst = 0;
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t o = 0; o < O; ++o) {
        double mag = 0;
        for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(double(x[m * K + k]) * w[o * K + k]);
        const float a = y[m * O + o], e = y_emu[m * O + o];
        ASSERT_TRUE(within_mma(a, e, mag, K, Fmt::f32)) << m << "," << o << ": " << a << " vs emu " << e;
        worst = std::max(worst, std::fabs(double(a) - e) / (std::ldexp(1.0, -24) * mag));
      }
    std::printf("SGEMM of bf16 numbers on the matrix cores, M=%lld K=%lld O=%lld: worst |diff| %.2f float ulps of sum|x*w|\n",
                static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(O), worst);
    // One value off the bf16 grid (the next float above) is found.
    w[static_cast<std::size_t>(O * K / 2)] = std::nextafter(w[static_cast<std::size_t>(O * K / 2)], 10.0f);
    Dev<float> d_w2(w);
    Dev<int> d_flag2(std::vector<int>{0});
    hip::mark_inexact_operands(d_w2.ptr(), O * K, Fmt::bf16, d_flag2.ptr(), test_stream());
    EXPECT_EQ(d_flag2.get().at(0), 1) << "a float that is no bf16 number was not found";
  }
}

TEST(Gemm, AtomicSplitK) {
  for (Fmt in : {Fmt::bf16, Fmt::f8}) check_dense(70, 300, 65, {in, Fmt::f32, true});
}

TEST(Gemm, AtomicDiffersBetweenLaunchesFixedDoesNot) {
  const std::int64_t M = 256, K = 4096, O = 256;
  auto rng = test_rng();
  const auto x = random_magnitudes(rng, M * K, 0.05f, 1.0f, Fmt::bf16);
  const auto w = random_magnitudes(rng, O * K, 0.05f, 1.0f, Fmt::bf16);
  Dev<float> d_x(x), d_w(w), d_y(M * O);
  auto once = [&](bool atomic) {
    hip::gemm(d_x.ptr(), K, d_w.ptr(), d_y.ptr(), O, M, K, O, hip::GemmSpec{Fmt::bf16, Fmt::f32, Fmt::bf16, atomic},
              test_stream());
    return d_y.get();
  };
  const auto f0 = once(false);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(once(false), f0);
  bool differs = false;
  const auto a0 = once(true);
  for (int i = 0; i < 20 && !differs; ++i) differs = once(true) != a0;
  EXPECT_TRUE(differs) << "20 atomic split-K launches gave identical bits: the reduction order never changed";
}

// Column groups (grouped_linear) and gathered rows (routed experts) against emu per group,
// on the vector ALU (bit for bit) and on the matrix cores (within_mma).
void check_grouped(bool matrix_cores) {
  SCOPED_TRACE(matrix_cores ? "matrix cores" : "vector ALU");
  const hip::GemmSpec spec{Fmt::bf16, Fmt::f32, Fmt::bf16, false, matrix_cores};
  auto expect_near = [&](float y, float e, const float* xr, const float* wr, std::int64_t K) {
    if (!matrix_cores) return y == e;
    double mag = 0;
    for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(double(xr[k]) * wr[k]);
    return within_mma(y, e, mag, K, Fmt::bf16);
  };
  const std::int64_t N = 37, G = 3, per = 96, Ro = 40;
  auto rng = test_rng();
  const auto x = random_magnitudes(rng, N * G * per, 0.05f, 1.0f, Fmt::bf16);
  const auto w = random_magnitudes(rng, G * Ro * per, 0.05f, 1.0f, Fmt::bf16);
  Dev<float> d_x(x), d_w(w), d_y(N * G * Ro);
  hip::GemmGroups g;
  g.count = G, g.x_stride = per, g.w_stride = Ro * per, g.y_stride = Ro, g.y_rows = N;
  hip::gemm(d_x.ptr(), G * per, d_w.ptr(), d_y.ptr(), G * Ro, N, per, Ro, spec, test_stream(), g);
  const auto y = d_y.get();
  // On the matrix cores, the weights as 16-bit patterns give the same bits.
  // So do both operands as patterns (the pipelined kernel: every row and group stride here
  // is a whole number of 16-byte chunks).
  auto same_with_bits16 = [&](const Dev<float>& wf, std::int64_t n, const Dev<float>& xf, std::int64_t nx, auto&& run) {
    if (!matrix_cores) return;
    Dev<std::uint16_t> w16(n), x16(nx);
    hip::pack_bits16(wf.ptr(), w16.ptr(), n, Fmt::bf16, test_stream());
    hip::pack_bits16(xf.ptr(), x16.ptr(), nx, Fmt::bf16, test_stream());
    run(hip::GemmInput(xf.ptr()), hip::GemmWeight(w16.ptr()));
    run(hip::GemmInput(x16.ptr()), hip::GemmWeight(w16.ptr()));
  };
  same_with_bits16(d_w, G * Ro * per, d_x, N * G * per, [&](hip::GemmInput x16, hip::GemmWeight w16) {
    Dev<float> d_y16(N * G * Ro);
    hip::gemm(x16, G * per, w16, d_y16.ptr(), G * Ro, N, per, Ro, spec, test_stream(), g);
    EXPECT_EQ(d_y16.get(), y) << "column groups: 16-bit operand patterns give other bits";
  });
  for (std::int64_t k = 0; k < G; ++k) {
    std::vector<float> xg(static_cast<std::size_t>(N * per)), yg(static_cast<std::size_t>(N * Ro));
    for (std::int64_t t = 0; t < N; ++t) std::copy_n(x.data() + t * G * per + k * per, per, xg.data() + t * per);
    emu::gemm(xg.data(), N, per, w.data() + k * Ro * per, Ro, emu::GemmSpec{}, yg.data());
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t o = 0; o < Ro; ++o)
        ASSERT_TRUE(expect_near(y[t * G * Ro + k * Ro + o], yg[t * Ro + o], xg.data() + t * per, w.data() + (k * Ro + o) * per, per))
            << "group " << k << ": " << y[t * G * Ro + k * Ro + o] << " vs emu " << yg[t * Ro + o];
  }
  // Gathered: 3 "experts", slots r of 20 tokens x 2 picks listed per expert.
  const std::int64_t T = 20, Kp = 2, E = 3, D = 64, I = 48;
  std::vector<std::int32_t> rows, starts{0};
  for (std::int64_t e = 0; e < E; ++e) {
    for (std::int64_t r = 0; r < T * Kp; ++r)
      if ((r * 7 + r / Kp) % E == e) rows.push_back(static_cast<std::int32_t>(r));
    starts.push_back(static_cast<std::int32_t>(rows.size()));
  }
  const auto z = random_magnitudes(rng, T * D, 0.05f, 1.0f, Fmt::bf16);
  const auto we = random_magnitudes(rng, E * I * D, 0.05f, 1.0f, Fmt::bf16);
  Dev<float> d_z(z), d_we(we), d_out(T * Kp * I);
  Dev<std::int32_t> d_rows(rows), d_starts(starts);
  hip::GemmGroups gg;
  gg.count = E, gg.w_stride = I * D, gg.d_rows = d_rows.ptr(), gg.d_starts = d_starts.ptr(), gg.a_div = Kp, gg.y_rows = T * Kp;
  hip::gemm(d_z.ptr(), D, d_we.ptr(), d_out.ptr(), I, T * Kp, D, I, spec, test_stream(), gg);
  const auto out = d_out.get();
  same_with_bits16(d_we, E * I * D, d_z, T * D, [&](hip::GemmInput z16, hip::GemmWeight w16) {
    Dev<float> d_out16(T * Kp * I);
    hip::gemm(z16, D, w16, d_out16.ptr(), I, T * Kp, D, I, spec, test_stream(), gg);
    EXPECT_EQ(d_out16.get(), out) << "gathered rows: 16-bit operand patterns give other bits";
    // Every tile height (the routed experts take 128 at 4096 tokens, hip/moe.cpp): the same bits.
    for (int tile_rows : {32, 64, 128}) {
      hip::GemmGroups gt = gg;
      gt.tile_rows = tile_rows;
      Dev<float> d_tile(T * Kp * I);
      hip::gemm(z16, D, w16, d_tile.ptr(), I, T * Kp, D, I, spec, test_stream(), gt);
      EXPECT_EQ(d_tile.get(), out) << "gathered rows: " << tile_rows << "-row tiles give other bits";
    }
  });
  for (std::int64_t e = 0; e < E; ++e)
    for (auto i = starts[e]; i < starts[e + 1]; ++i) {
      const std::int64_t r = rows[static_cast<std::size_t>(i)];
      std::vector<float> yr(static_cast<std::size_t>(I));
      emu::gemm(z.data() + (r / Kp) * D, 1, D, we.data() + e * I * D, I, emu::GemmSpec{}, yr.data());
      for (std::int64_t o = 0; o < I; ++o)
        ASSERT_TRUE(expect_near(out[r * I + o], yr[o], z.data() + (r / Kp) * D, we.data() + (e * I + o) * D, D))
            << "slot " << r << " expert " << e << ": " << out[r * I + o] << " vs emu " << yr[o];
    }
}

TEST(Gemm, GroupedColumnsAndGatheredRows) {
  check_grouped(false);
  if (hip::has_matrix_cores(device_arch())) check_grouped(true);
}

// A release weight as stored, decoded while the matrix-core kernel stages it, gives the bits of
// the same GEMM with the weight dequantised first (core's float64 dequantisation, converted to
// float32, rounded as an operand and packed, as the backend loads every other weight): the
// kernels see the same operands. Shapes that are no multiple of 128 (FP8 blocks) or 32 (FP4
// groups), odd widths (the per-element path), scales at both ends of E8M0 (products that
// overflow or leave the operand format's range round the same way), the F32 scale container,
// stacked experts with gathered rows; and the float32 dequantisation on the device.
struct Release {
  Tensor codes, scale;          // as the release stores them
  std::vector<float> dequant;   // float32 of the float64 dequantisation [rows, K]
};

Release random_fp8(std::mt19937_64& rng, std::int64_t O, std::int64_t K, bool f32_scale) {
  Release r{Tensor(DType::f8_e4m3, {O, K}), Tensor(f32_scale ? DType::f32 : DType::u8, {(O + 127) / 128, (K + 127) / 128}), {}};
  auto* c = reinterpret_cast<std::uint8_t*>(r.codes.raw());
  for (std::int64_t i = 0; i < O * K; ++i) {
    auto b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN code
    c[i] = b;
  }
  for (std::int64_t i = 0; i < r.scale.numel(); ++i) {
    // Both ends of E8M0 in two blocks where there are more (one block alone would be all
    // flushed to zero as an fp16 operand, and the test would see nothing).
    const bool ends = r.scale.numel() > 2;
    const auto e = static_cast<std::uint8_t>(ends && i == 0 ? 1 : ends && i == 1 ? 240 : 112 + rng() % 24);
    if (f32_scale) r.scale.data<float>()[i] = static_cast<float>(e8m0_value(e)) * (1.0f + static_cast<float>(rng() % 7) / 8);
    else r.scale.data<std::uint8_t>()[i] = e;
  }
  const Tensor d = dequantize_fp8(r.codes, r.scale, "test fp8");
  for (std::int64_t i = 0; i < d.numel(); ++i) r.dequant.push_back(static_cast<float>(d.data<double>()[i]));
  return r;
}

Release random_fp4(std::mt19937_64& rng, std::int64_t rows, std::int64_t K) {
  Release r{Tensor(DType::u8, {rows, (K + 1) / 2}), Tensor(DType::u8, {rows, (K + 31) / 32}), {}};
  for (std::int64_t i = 0; i < r.codes.numel(); ++i) r.codes.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng());
  for (std::int64_t i = 0; i < r.scale.numel(); ++i)
    r.scale.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i == 0 && rows > 4 ? 0 : i == 1 && rows > 4 ? 240 : 118 + rng() % 12);
  std::vector<double> d(static_cast<std::size_t>(rows * K));
  dequantize_fp4(r.codes, r.scale, K, d.data(), "test fp4");
  r.dequant.assign(d.begin(), d.end());
  return r;
}

// Bit patterns (an f16 operand that overflows makes inf and NaN outputs, equal only as bits).
std::vector<std::uint32_t> float_bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b;
  for (float x : v) b.push_back(arith::float_bits(x));
  return b;
}

// y of the decoded weight against y of the dequantised one, both on the matrix cores.
void expect_decoded_equals_dequantised(const hip::QuantWeight& q, const std::vector<float>& dequant, std::int64_t M,
                                       std::int64_t K, std::int64_t O, Fmt in, const hip::GemmGroups& g, std::int64_t x_rows,
                                       const std::string& what) {
  SCOPED_TRACE(what + (in == Fmt::bf16 ? " bf16" : " f16"));
  auto rng = test_rng(static_cast<std::uint64_t>(K * 31 + O));
  const auto x = random_magnitudes(rng, x_rows * K, 0.05f, 1.0f, in);
  const std::int64_t n = static_cast<std::int64_t>(dequant.size());
  Dev<float> d_x(x), d_w(dequant), d_dq(n);
  // The device's float32 dequantisation equals the host's float64 one converted.
  hip::dequantize_weight(q, n / K, K, d_dq.ptr(), test_stream());
  EXPECT_EQ(float_bits_of(d_dq.get()), float_bits_of(dequant)) << "dequantize_weight differs from the float64 dequantisation";
  hip::quantize_weight(d_w.ptr(), n / K, K, in, test_stream());
  Dev<std::uint16_t> d_w16(n), d_x16(x_rows * K);
  hip::pack_bits16(d_w.ptr(), d_w16.ptr(), n, in, test_stream());
  hip::pack_bits16(d_x.ptr(), d_x16.ptr(), x_rows * K, in, test_stream());
  // Decoded once into 16-bit operands (a model whose decoded weights fit): the same patterns.
  Dev<std::uint16_t> d_once(n);
  hip::decode_weight_bits16(q, n / K, K, in, d_once.ptr(), test_stream());
  EXPECT_EQ(d_once.get(), d_w16.get()) << "decode_weight_bits16 differs from dequantise, quantize_weight, pack_bits16";
  const hip::GemmSpec spec{in, Fmt::f32, Fmt::bf16, false, true};
  const std::int64_t ny = g.y_rows ? g.y_rows * O : M * O;
  for (const bool x_bits : {false, true}) {
    const hip::GemmInput xin = x_bits ? hip::GemmInput(d_x16.ptr()) : hip::GemmInput(d_x.ptr());
    Dev<float> d_want(ny), d_got(ny);
    hip::gemm(xin, K, hip::GemmWeight(d_w16.ptr()), d_want.ptr(), O, M, K, O, spec, test_stream(), g);
    hip::gemm(xin, K, hip::GemmWeight(q), d_got.ptr(), O, M, K, O, spec, test_stream(), g);
    const auto want = d_want.get();
    EXPECT_EQ(float_bits_of(d_got.get()), float_bits_of(want))
        << "decoded in the kernel vs dequantised first" << (x_bits ? " (16-bit activations)" : "");
    std::int64_t nonzero = 0;
    for (float v : want) nonzero += v != 0;
    EXPECT_GT(nonzero, ny / 2) << "the product is mostly zero: the test would not see a wrong decode";
  }
}

TEST(Gemm, ReleaseWeightsDecodedInTheKernel) {
  if (!hip::has_matrix_cores(device_arch())) GTEST_SKIP() << "no matrix cores on " << device_arch();
  auto rng = test_rng(77);
  for (const auto& [M, K, O, f32_scale] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>{99, 1000, 300, false},
                                         {40, 257, 131, false}, {130, 512, 256, true}, {1, 6, 3, false}}) {
    const Release r = random_fp8(rng, O, K, f32_scale);
    std::vector<float> scale(static_cast<std::size_t>(r.scale.numel()));
    const auto sc = scale_values(r.scale, "test fp8");
    std::copy(sc.begin(), sc.end(), scale.begin());
    Dev<std::uint8_t> d_codes(std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(r.codes.raw()),
                                                          reinterpret_cast<const std::uint8_t*>(r.codes.raw()) + O * K));
    Dev<float> d_scale(scale);
    const hip::QuantWeight q{hip::QuantWeight::Format::fp8, d_codes.ptr(), d_scale.ptr(), nullptr};
    for (Fmt in : {Fmt::bf16, Fmt::f16})
      expect_decoded_equals_dequantised(q, r.dequant, M, K, O, in, {}, M,
                                        "fp8 M=" + std::to_string(M) + " K=" + std::to_string(K) + " O=" + std::to_string(O) +
                                            (f32_scale ? " F32 scales" : ""));
    // A NaN code is found.
    Dev<int> d_flag(std::vector<int>{0});
    hip::mark_nan_codes(q, O, K, d_flag.ptr(), test_stream());
    EXPECT_EQ(d_flag.get().at(0), 0);
    auto codes = d_codes.get();
    codes[static_cast<std::size_t>(O * K / 2)] = 0xff;
    Dev<std::uint8_t> d_nan(codes);
    Dev<int> d_flag2(std::vector<int>{0});
    hip::mark_nan_codes({hip::QuantWeight::Format::fp8, d_nan.ptr(), d_scale.ptr(), nullptr}, O, K, d_flag2.ptr(), test_stream());
    EXPECT_EQ(d_flag2.get().at(0), 1) << "an FP8 NaN code was not found";
  }
  // FP4 experts stacked (E x R rows), tokens gathered per expert as the routed experts are.
  for (const auto& [K, R] : {std::pair<std::int64_t, std::int64_t>{256, 96}, {100, 40}, {98, 33}, {7, 5}}) {
    const std::int64_t E = 3, T = 20, Kp = 2;
    const Release r = random_fp4(rng, E * R, K);
    Dev<std::uint8_t> d_codes(std::vector<std::uint8_t>(r.codes.data<std::uint8_t>(), r.codes.data<std::uint8_t>() + r.codes.numel()));
    Dev<std::uint8_t> d_e8m0(std::vector<std::uint8_t>(r.scale.data<std::uint8_t>(), r.scale.data<std::uint8_t>() + r.scale.numel()));
    const hip::QuantWeight q{hip::QuantWeight::Format::fp4, d_codes.ptr(), nullptr, d_e8m0.ptr()};
    std::vector<std::int32_t> rows, starts{0};
    for (std::int64_t e = 0; e < E; ++e) {
      for (std::int64_t s = 0; s < T * Kp; ++s)
        if ((s * 7 + s / Kp) % E == e) rows.push_back(static_cast<std::int32_t>(s));
      starts.push_back(static_cast<std::int32_t>(rows.size()));
    }
    Dev<std::int32_t> d_rows(rows), d_starts(starts);
    hip::GemmGroups g;
    g.count = E, g.w_stride = R * K, g.d_rows = d_rows.ptr(), g.d_starts = d_starts.ptr(), g.a_div = Kp, g.y_rows = T * Kp;
    std::int64_t most = 0;
    for (std::int64_t e = 0; e < E; ++e) most = std::max<std::int64_t>(most, starts[e + 1] - starts[e]);
    for (Fmt in : {Fmt::bf16, Fmt::f16})
      for (int tile_rows : {0, 128}) {  // the register-staged kernel's 32- and 128-row tiles
        g.tile_rows = tile_rows;
        expect_decoded_equals_dequantised(q, r.dequant, most, K, R, in, g, T,
                                          "fp4 experts K=" + std::to_string(K) + " R=" + std::to_string(R) +
                                              " tile rows " + std::to_string(tile_rows));
      }
  }
}

}  // namespace
}  // namespace tdiff::gputest
