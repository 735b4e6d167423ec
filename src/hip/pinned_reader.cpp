#include "hip/pinned_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace tdiff::hip {

PinnedReader::~PinnedReader() {
  for (int i = 0; i < 2; ++i) {
    try {
      if (pending_[i]) event_sync(copied_[i]);
    } catch (...) {  // a faulted device: the buffers go with the process
    }
    if (copied_[i]) event_destroy(copied_[i]);
    if (staging_[i]) pinned_free(staging_[i]);
  }
}

void PinnedReader::fill(int fd, const std::string& path, std::uint64_t offset, std::size_t bytes, void* into) {
  auto* at = static_cast<char*>(into);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, at, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      input_error("{}: cannot read {} bytes at offset {} ({})", path, bytes, offset,
                  got < 0 ? std::strerror(errno) : "the file ends before them");
    at += got, offset += static_cast<std::uint64_t>(got), bytes -= static_cast<std::size_t>(got);
  }
}

void PinnedReader::read(void* dst, int fd, const std::string& path, std::uint64_t offset, std::size_t bytes,
                        Stream s) {
  const std::lock_guard lock(mutex_);
  for (std::size_t done = 0, i = 0; done < bytes; ++i) {
    const std::size_t b = i % 2, n = std::min(kChunk, bytes - done);
    if (!staging_[b]) staging_[b] = pinned_alloc(kChunk), copied_[b] = event_create();
    if (pending_[b]) event_sync(copied_[b]);  // its last copy (two chunks ago) is done
    fill(fd, path, offset + done, n, staging_[b]);
    copy_h2d(static_cast<char*>(dst) + done, staging_[b], n, s);
    event_record(copied_[b], s);
    pending_[b] = true;
    done += n;
  }
}

}  // namespace tdiff::hip
