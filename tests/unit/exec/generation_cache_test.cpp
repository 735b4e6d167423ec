// The cache a generation step runs against (exec/generation_cache.h): the window ring's slots
// and the keys a step sees, the compressor's rows kept across steps and the entries each step
// emits, on hand-made tensors whose values name their positions.
#include <gtest/gtest.h>

#include "exec/generation_cache.h"

namespace tdiff {
namespace {

// [1, T, width] rows whose every value is the row's position.
Tensor position_rows(std::int64_t begin, std::int64_t end, std::int64_t width) {
  Tensor t(DType::f64, {1, end - begin, width});
  for (std::int64_t p = begin; p < end; ++p)
    for (std::int64_t c = 0; c < width; ++c) t.data<double>()[(p - begin) * width + c] = static_cast<double>(p);
  return t;
}

std::vector<double> first_channel(const Tensor& t) {
  std::vector<double> out;
  for (std::int64_t r = 0; r < t.dim(1); ++r) out.push_back(t.data<double>()[r * t.dim(2)]);
  return out;
}

TEST(GenerationCache, DecodeWritesItsSlotThenReadsTheRing) {
  GenerationCache cache(1, 4);
  cache.begin_step(0, 6, false);  // a first chunk of 6: its own rows only
  EXPECT_EQ(cache.key_positions(), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(first_channel(cache.window_keys(0, position_rows(0, 6, 2))), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  // Query 5 sees 2..5 (q − W < kp ≤ q), query 0 only itself.
  const Tensor vis = cache.window_visibility();
  EXPECT_EQ(vis.dtype(), DType::boolean);
  const auto* v = vis.data<std::uint8_t>();
  EXPECT_EQ(std::vector<int>(v + 5 * 6, v + 6 * 6), (std::vector<int>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(std::vector<int>(v, v + 6), (std::vector<int>{1, 0, 0, 0, 0, 0}));
  cache.end_step();

  cache.begin_step(6, 7, true);  // token 6 goes to slot 2, over token 2
  EXPECT_EQ(cache.key_positions(), (std::vector<std::int64_t>{4, 5, 6, 3}));
  EXPECT_EQ(first_channel(cache.window_keys(0, position_rows(6, 7, 2))), (std::vector<double>{4, 5, 6, 3}));
  const Tensor dv = cache.window_visibility();
  EXPECT_EQ(std::vector<int>(dv.data<std::uint8_t>(), dv.data<std::uint8_t>() + 4), (std::vector<int>{1, 1, 1, 1}));
  cache.end_step();

  cache.begin_step(7, 9, false);  // a later chunk: the ring as it was, then the chunk
  EXPECT_EQ(cache.key_positions(), (std::vector<std::int64_t>{4, 5, 6, 3, 7, 8}));
  EXPECT_EQ(first_channel(cache.window_keys(0, position_rows(7, 9, 2))), (std::vector<double>{4, 5, 6, 3, 7, 8}));
}

TEST(GenerationCache, ACompressorKeepsTheRowsItsNextEntryPools) {
  GenerationCache cache(1, 8);
  const std::string pool = "L01.attn.cmp.pool";
  // Rate 4, overlapping: 6 rows pool into entry 0; rows 0..5 stay (window 0 for the A half,
  // window 1 open).
  cache.begin_step(0, 6, false);
  auto span = cache.pool_span(pool, position_rows(0, 6, 3), position_rows(0, 6, 3));
  EXPECT_EQ(span.first_position, 0);
  EXPECT_EQ(first_channel(span.P), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  Tensor fresh = cache.pooled(pool, 4, true, position_rows(0, 1, 2));  // what a pool made of the span
  EXPECT_EQ(fresh.dim(1), 1);
  cache.add_entries(pool, fresh);
  cache.end_step();
  EXPECT_EQ(cache.entries_before(pool), 1);

  cache.begin_step(6, 7, true);  // no window closes: nothing new, the rows grow
  span = cache.pool_span(pool, position_rows(6, 7, 3), position_rows(6, 7, 3));
  EXPECT_EQ(first_channel(span.P), (std::vector<double>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cache.pooled(pool, 4, true, position_rows(0, 1, 2)).dim(1), 0);
  cache.end_step();

  cache.begin_step(7, 8, true);  // token 7 closes window 1: entry 1; window 1's rows stay for entry 2
  span = cache.pool_span(pool, position_rows(7, 8, 3), position_rows(7, 8, 3));
  EXPECT_EQ(span.first_position, 0);
  fresh = cache.pooled(pool, 4, true, position_rows(0, 2, 2));  // the span's entries 0 and 1
  EXPECT_EQ(first_channel(fresh), (std::vector<double>{1}));
  EXPECT_EQ(cache.add_entries(pool, fresh).dim(1), 2);
  cache.end_step();

  cache.begin_step(8, 9, true);
  span = cache.pool_span(pool, position_rows(8, 9, 3), position_rows(8, 9, 3));
  EXPECT_EQ(span.first_position, 4);
  EXPECT_EQ(first_channel(span.P), (std::vector<double>{4, 5, 6, 7, 8}));
  EXPECT_EQ(span.entries_before, 2);
}

TEST(GenerationCache, WithoutOverlapOnlyTheOpenWindowStays) {
  GenerationCache cache(1, 8);
  cache.begin_step(0, 10, false);
  (void)cache.pool_span("p", position_rows(0, 10, 1), position_rows(0, 10, 1));
  EXPECT_EQ(cache.pooled("p", 4, false, position_rows(0, 2, 1)).dim(1), 2);
  cache.end_step();
  cache.begin_step(10, 11, true);
  const auto span = cache.pool_span("p", position_rows(10, 11, 1), position_rows(10, 11, 1));
  EXPECT_EQ(span.first_position, 8);
  EXPECT_EQ(first_channel(span.P), (std::vector<double>{8, 9, 10}));
}

}  // namespace
}  // namespace tdiff
