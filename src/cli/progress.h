#pragma once
// Progress of long work on stderr: one line rewritten in place on a terminal, a line every
// few percent otherwise (logs stay short).
#include <cstdio>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

namespace tdiff::cli {

class Progress {
 public:
  Progress(std::string what, std::size_t total) : what_(std::move(what)), total_(total), tty_(isatty(2) != 0) {}
  void step(std::size_t done, const std::string& item) {
    if (tty_) {
      fmt::print(stderr, "\r\033[K{} [{}/{}] {}", what_, done, total_, item);
      std::fflush(stderr);
    } else if (total_ && done * 10 / total_ != last_decile_) {
      last_decile_ = done * 10 / total_;
      fmt::print(stderr, "{} [{}/{}] {}\n", what_, done, total_, item);
    }
  }
  void finish(const std::string& summary) {
    if (tty_) fmt::print(stderr, "\r\033[K");
    fmt::print(stderr, "{}\n", summary);
  }

 private:
  std::string what_;
  std::size_t total_;
  bool tty_;
  std::size_t last_decile_ = 0;
};

}  // namespace tdiff::cli
