#pragma once
// Progress of long work on stderr: one line rewritten in place on a terminal, a line every
// tenth of the work otherwise (logs stay short). In base: the reference store's on-demand
// recompute (casefile/reference_layers.h) shows it as the commands do.
#include <cstdio>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

namespace tdiff {

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

// Status of work made of pieces whose count is not known up front (bisect's runs, audit's
// knobs): rewritten in place on a terminal; in a log one line per piece, so a CI log shows
// what started when; a counted series (`done` of `total`) logs every tenth.
class StatusLine {
 public:
  explicit StatusLine(std::string what) : what_(std::move(what)), tty_(isatty(2) != 0) {}
  void show(const std::string& item, std::size_t done = 0, std::size_t total = 0) {
    const std::string count = total ? fmt::format("[{}/{}] ", done, total) : "";
    if (tty_) {
      fmt::print(stderr, "\r\033[K{}: {}{}", what_, count, item);
      std::fflush(stderr);
      return;
    }
    if (total && done != 1 && done != total && done * 10 / total == (done - 1) * 10 / total) return;
    fmt::print(stderr, "{}: {}{}\n", what_, count, item);
  }
  // Before other output on a terminal, so the status line does not run into it.
  void clear() {
    if (tty_) fmt::print(stderr, "\r\033[K");
  }

 private:
  std::string what_;
  bool tty_;
};

}  // namespace tdiff
