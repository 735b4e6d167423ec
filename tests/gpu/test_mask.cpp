// covers: window_mask
// The sliding-window mask against its definition (exact): two rows with different padding
// (a padded tail and a padded head), a window shorter and one longer than the row.
#include "gpu_test.h"
#include "hip/mask.h"

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

}  // namespace
}  // namespace tdiff::gputest
