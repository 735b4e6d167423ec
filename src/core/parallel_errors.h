#pragma once
// An exception must not leave an OpenMP region (the program would terminate): work items run
// through ParallelErrors::run, which keeps the first exception, and the thread that started
// the region rethrows it after the region ends.
#include <exception>
#include <mutex>

namespace tdiff {

class ParallelErrors {
 public:
  template <class F>
  void run(F&& work) noexcept {
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

}  // namespace tdiff
