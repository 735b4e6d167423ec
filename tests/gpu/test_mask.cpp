// covers: window_mask, cmp_mask
// The sliding-window mask against its definition (exact): two rows with different padding
// (a padded tail and a padded head), a window shorter and one longer than the row. The
// compressed-entry masks against refcpu's (the reference's integers): HCA from positions and
// row lengths, CSA from a random selection with -1 slots.
#include "gpu_test.h"
#include "hip/mask.h"
#include "refcpu/mask.h"

namespace tdiff::gputest {
namespace {

TEST(Mask, WindowMaskMatchesItsDefinition) {
  const std::int64_t B = 2, S = 37;
  std::vector<std::uint8_t> valid(static_cast<std::size_t>(B * S), 1);
  for (std::int64_t j = 30; j < S; ++j) valid[static_cast<std::size_t>(j)] = 0;      // row 0: padded tail
  for (std::int64_t j = 0; j < 5; ++j) valid[static_cast<std::size_t>(S + j)] = 0;   // row 1: padded head
  for (std::int64_t W : {std::int64_t{8}, std::int64_t{64}}) {
    Dev<std::uint8_t> d_valid(valid), d_win(B * S * S);
    hip::window_mask(d_valid.ptr(), B, S, W, d_win.ptr(), test_stream());
    const auto win = d_win.get();
    std::int64_t ones = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < S; ++i)
        for (std::int64_t j = 0; j < S; ++j) {
          const bool want = j > i - W && j <= i && valid[static_cast<std::size_t>(b * S + j)];
          ones += want;
          ASSERT_EQ(win[static_cast<std::size_t>((b * S + i) * S + j)], want ? 1 : 0) << "W=" << W << " b=" << b << " i=" << i << " j=" << j;
        }
    EXPECT_GT(ones, 0);
  }
}

TEST(Mask, CompressedMaskEqualsTheReference) {
  const std::int64_t B = 2, S = 45, rate = 4, n = 12, k = 5;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(B * S)), length{S, 29};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(b * S + i)] = i < length[b] ? i : -1;
  std::mt19937_64 rng(5);
  std::vector<std::int64_t> sel(static_cast<std::size_t>(B * S * k));
  for (auto& w : sel) w = static_cast<std::int64_t>(rng() % (n + 3)) - 3;  // about a quarter -1 (none)
  for (auto& w : sel) w = std::max<std::int64_t>(w, -1);
  for (const bool csa : {false, true}) {
    std::vector<std::uint8_t> want(static_cast<std::size_t>(B * S * n), 0);
    refcpu::compressed_mask(pos.data(), length.data(), csa ? sel.data() : nullptr, B, S, n, k, rate, want.data());
    Dev<std::int64_t> d_pos(pos), d_len(length), d_sel(sel);
    Dev<std::uint8_t> d_vis(B * S * n);
    hip::compressed_mask(d_pos.ptr(), d_len.ptr(), csa ? d_sel.ptr() : nullptr, B, S, n, k, rate, d_vis.ptr(),
                         test_stream());
    const auto got = d_vis.get();
    std::int64_t ones = 0;
    for (std::int64_t e = 0; e < B * S * n; ++e) {
      ones += want[static_cast<std::size_t>(e)];
      ASSERT_EQ(got[static_cast<std::size_t>(e)], want[static_cast<std::size_t>(e)]) << (csa ? "CSA" : "HCA") << " cell " << e;
    }
    EXPECT_GT(ones, 0);
    EXPECT_LT(ones, B * S * n);
  }
}

}  // namespace
}  // namespace tdiff::gputest
