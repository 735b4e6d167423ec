// Generation schedules (model/schedule.h): steps, the predicting rows, and what a batch cannot run.
#include <gtest/gtest.h>

#include "base/error.h"
#include "model/schedule.h"

namespace tdiff {
namespace {

Batch batch(std::int64_t rows, std::int64_t seq, std::int64_t pad = 0) {
  Tensor ids(DType::i64, {rows, seq}), mask(DType::u8, {rows, seq});
  for (std::int64_t i = 0; i < rows * seq; ++i) {
    ids.data<std::int64_t>()[i] = i % 7;
    mask.data<std::uint8_t>()[i] = (i % seq) < seq - pad ? 1 : 0;
  }
  return Batch::make(ids, mask, 16, "test");
}

TEST(Schedule, StepsAndPredictingRows) {
  const Schedule s = Schedule::make(batch(2, 12), 4, {5, 3}, "test");
  EXPECT_EQ(s.prompt, 8);
  const auto steps = s.steps(12);
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0].end, 5);
  EXPECT_FALSE(steps[1].decode);
  EXPECT_EQ(steps[1].begin, 5);
  EXPECT_TRUE(steps[2].decode);
  EXPECT_EQ(steps[2].begin, 8);
  EXPECT_EQ(steps[5].begin, 11);
  EXPECT_EQ(s.predicting_rows(12), (std::vector<std::int64_t>{7, 8, 9, 10, 11}));
  EXPECT_EQ(s.describe(12), "prompt 8 (chunks 5,3), 4 decode steps");
  EXPECT_EQ(Schedule::make(batch(1, 12), 1, {}, "t").describe(12), "prompt 11 (whole), 1 decode step");
  EXPECT_TRUE(Schedule{}.predicting_rows(12).empty());
  EXPECT_FALSE(Schedule{}.generation());
}

TEST(Schedule, WhatABatchCannotRun) {
  EXPECT_THROW(Schedule::make(batch(2, 12, 2), 4, {}, "t"), InputError);  // padded rows
  EXPECT_THROW(Schedule::make(batch(1, 12), 12, {}, "t"), InputError);    // no prompt left
  EXPECT_THROW(Schedule::make(batch(1, 12), 0, {}, "t"), InputError);
  EXPECT_THROW(Schedule::make(batch(1, 12), 4, {5, 4}, "t"), InputError);  // 9 != 8
  EXPECT_EQ(parse_chunk_list("5,3,7", "x"), (std::vector<std::int64_t>{5, 3, 7}));
  for (const char* bad : {"", "5,", ",5", "5,-1", "5,0", "5;3", "99999999999999999999"})
    EXPECT_THROW(parse_chunk_list(bad, "x"), InputError) << bad;
}

}  // namespace
}  // namespace tdiff
