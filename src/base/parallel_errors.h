#pragma once
// An exception must not leave an OpenMP region (the program would terminate): work items run
// through ParallelErrors::run, which keeps the first exception, and the thread that started
// the region rethrows it after the region ends. run(item, work) keeps the exception of the
// lowest item instead, so the error a user sees does not depend on the thread count.
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <utility>

namespace tdiff {

class ParallelErrors {
 public:
  template <class F>
  void run(F&& work) noexcept {
    run(kAnyItem, std::forward<F>(work));  // no item is lower than another: the first to fail stays
  }
  template <class F>
  void run(std::size_t item, F&& work) noexcept {
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_ || item < first_item_) first_ = std::current_exception(), first_item_ = item;
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
  static constexpr std::size_t kAnyItem = std::numeric_limits<std::size_t>::max();
  std::size_t first_item_ = kAnyItem;
};

}  // namespace tdiff
