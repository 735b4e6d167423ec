#pragma once
// Reads byte ranges of weight files straight onto the device: pread into page-locked staging
// buffers, each copied asynchronously while the next is read. The weights' mapped pages took
// a 4 KiB page fault at a time (1.5-2 GB/s on the streamed real4); pread of large chunks runs
// at the page cache's or the disk's speed, and the link copies overlap it.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "hip/device.h"

namespace tdiff::hip {

class PinnedReader {
 public:
  PinnedReader() = default;
  ~PinnedReader();
  PinnedReader(const PinnedReader&) = delete;
  PinnedReader& operator=(const PinnedReader&) = delete;

  // Copies bytes [offset, offset + bytes) of the open file `fd` (`path` names it in errors) to
  // device memory `dst`, enqueued on
  // `s`; on return the copies may still run (the caller syncs `s` before reading `dst`), but the
  // staging buffers are safe to reuse. Thread-safe (calls are serialised: the link is shared).
  // A failed or short read is an InputError naming the file.
  void read(void* dst, int fd, const std::string& path, std::uint64_t offset, std::size_t bytes, Stream s);

  static constexpr std::size_t kChunk = std::size_t{32} << 20;

 private:
  void fill(int fd, const std::string& path, std::uint64_t offset, std::size_t bytes, void* into);

  std::mutex mutex_;
  void* staging_[2] = {nullptr, nullptr};
  Event copied_[2] = {nullptr, nullptr};  // the last copy out of staging_[i]
  bool pending_[2] = {false, false};
};

}  // namespace tdiff::hip
