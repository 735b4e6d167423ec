// covers: rope_table, rope, entry_rope, rope_inverse
// hip::rope_tables / rope_rotate against emu for every angle format and YaRN frequencies (the
// angles bit-identical; cos/sin within one float ulp: the device's cos/sin of the same float
// angle against glibc's cosf/sinf, which are not correctly rounded everywhere; the rotation
// bit-identical given the same tables), against refcpu in float64, and two invariants: a rotation keeps each pair's
// norm, and the inverse undoes it.
#include "model/config.h"
#include "emu/rope.h"
#include "gpu_test.h"
#include "hip/rope.h"
#include "refcpu/rope.h"

namespace tdiff::gputest {
namespace {

TEST(Rope, TablesAndRotationMatchEmuAndReference) {
  const std::int64_t r = 64, half = r / 2, P = 300, width = 192, rows = P * 3;
  RopeTable yarn{160000.0, true, 16.0, 65536.0, 32.0, 1.0};
  std::vector<std::int64_t> pos(static_cast<std::size_t>(P));
  for (std::int64_t i = 0; i < P; ++i) pos[static_cast<std::size_t>(i)] = (i * 37) % 5000 - 3;  // padding rows: negative
  for (const RopeTable& table : {RopeTable{10000.0}, yarn})
    for (RopeAngle angle : {RopeAngle::f32, RopeAngle::bf16, RopeAngle::f16, RopeAngle::fast}) {
      SCOPED_TRACE("yarn=" + std::to_string(table.yarn) + " angle=" + std::to_string(int(angle)));
      const auto freq = emu::rope_frequencies(table, r);
      std::vector<float> c_emu(static_cast<std::size_t>(P * half)), s_emu(c_emu.size());
      emu::rope_tables(freq, pos.data(), P, angle, c_emu.data(), s_emu.data());
      Dev<std::int64_t> d_pos(pos);
      Dev<float> d_freq(freq), d_c(P * half), d_s(P * half);
      hip::rope_tables(d_pos.ptr(), P, d_freq.ptr(), half, angle, d_c.ptr(), d_s.ptr(), test_stream());
      const auto c = d_c.get(), s = d_s.get();
      EXPECT_LE(ulp_stats(c, c_emu, Fmt::f32).max_ulps, 1.0);
      EXPECT_LE(ulp_stats(s, s_emu, Fmt::f32).max_ulps, 1.0);
      if (angle == RopeAngle::f32) {  // against the float64 tables (the float32 angle dominates)
        const auto fr = refcpu::rope_frequencies(table, r);
        std::vector<double> cr(c.size()), sr(c.size());
        refcpu::rope_tables(fr, pos.data(), P, cr.data(), sr.data());
        EXPECT_LE(error_vs(c, cr).max_abs, 5e-3);
        EXPECT_LE(error_vs(s, sr).max_abs, 5e-3);
      }
      // Rotation: 3 heads per position, table row = row / 3.
      auto rng = test_rng();
      const auto x = random_magnitudes(rng, rows * width, 0.05f, 1.0f, Fmt::bf16);
      std::vector<std::int64_t> trow(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) trow[static_cast<std::size_t>(i)] = i / 3;
      for (bool inverse : {false, true}) {
        std::vector<float> y_emu(x.size());
        // emu rotates with the device's tables, so the rotation itself must match bit for bit.
        emu::rope_rotate(x.data(), rows, width, r, c.data(), s.data(), trow.data(), inverse, Fmt::f32, y_emu.data());
        Dev<float> d_x(x), d_y(rows * width);
        hip::rope_rotate(d_x.ptr(), rows, width, r, d_c.ptr(), d_s.ptr(), 3, P, inverse, Fmt::f32, d_y.ptr(), test_stream());
        const auto y = d_y.get();
        EXPECT_EQ(ulp_stats(y, y_emu, Fmt::f32).max_ulps, 0.0);
        // Pair norms kept (float32 output).
        for (std::int64_t i = 0; i < rows; i += 17)
          for (std::int64_t f = 0; f < half; ++f) {
            const std::size_t a = static_cast<std::size_t>(i * width + width - r + 2 * f);
            const double n0 = std::hypot(x[a], x[a + 1]), n1 = std::hypot(y[a], y[a + 1]);
            ASSERT_NEAR(n0, n1, 1e-5 * n0);
          }
        if (!inverse) {  // the inverse undoes the rotation
          Dev<float> d_back(rows * width);
          hip::rope_rotate(d_y.ptr(), rows, width, r, d_c.ptr(), d_s.ptr(), 3, P, true, Fmt::f32, d_back.ptr(), test_stream());
          EXPECT_LE(error_vs(d_back.get(), to_double(x)).max_abs, 1e-5);
        }
      }
    }
}

}  // namespace
}  // namespace tdiff::gputest
