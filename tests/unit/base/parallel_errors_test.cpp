// ParallelErrors: an exception inside an OpenMP loop comes out of it, and run(item, ...)
// keeps the lowest item's, whichever thread failed first.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/parallel_errors.h"

namespace tdiff {
namespace {

TEST(ParallelErrors, TheLowestItemsExceptionWhateverFailedFirst) {
  ParallelErrors errors;
  // Item 0 fails last (it waits first), every other item at once.
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
  for (int i = 0; i < 64; ++i)
    errors.run(static_cast<std::size_t>(i), [&] {
      if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (i == 0 || i % 3 == 1) throw std::runtime_error("item " + std::to_string(i));
    });
  try {
    errors.rethrow();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item 0");
  }
}

TEST(ParallelErrors, NothingToRethrowWhenEveryItemSucceeds) {
  ParallelErrors errors;
  int done = 0;
#pragma omp parallel for reduction(+ : done)
  for (int i = 0; i < 16; ++i) errors.run(static_cast<std::size_t>(i), [&] { ++done; });
  EXPECT_NO_THROW(errors.rethrow());
  EXPECT_EQ(done, 16);
}

}  // namespace
}  // namespace tdiff
