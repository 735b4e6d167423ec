#include "base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"
#include "base/temp_files.h"

namespace tdiff {

namespace {

// What the holder wrote into the lock file ("pid 123: tdiff golden"), or a general phrase.
std::string holder_of(int fd) {
  char buf[256] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "another tdiff command" : s;
}

// True when `fd` is still the file at `path` (its holder did not remove it meanwhile).
bool still_at(int fd, const std::string& path) {
  struct stat held {}, named {};
  return fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
         held.st_dev == named.st_dev;
}

}  // namespace

std::string FileLock::lock_path_for(const std::string& target) {
  const std::filesystem::path p(target);
  return (p.parent_path() / ("." + p.filename().string() + ".tdiff.lock")).string();
}

FileLock::FileLock(const std::string& target, const std::string& command)
    : target_(target), lock_path_(lock_path_for(target)) {
  bool told = false;
  for (;;) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const std::string dir = std::filesystem::path(lock_path_).parent_path().string();
      input_error("{}: cannot create a lock file in '{}' ({})", target, dir.empty() ? "." : dir, std::strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (!told) {
        fmt::print(stderr, "waiting for {}: {} is updating it\n", target, holder_of(fd));
        told = true;
      }
      int rc;
      while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
      }
      if (rc != 0) {
        const int err = errno;
        ::close(fd);
        input_error("{}: cannot lock {} ({})", target, lock_path_, std::strerror(err));
      }
    }
    if (still_at(fd, lock_path_)) {
      fd_ = fd;
      break;
    }
    ::close(fd);  // its holder removed it on release: lock the one at the path now
  }
  const std::string who = fmt::format("pid {}: {}\n", ::getpid(), command);
  if (ftruncate(fd_, 0) == 0 && pwrite(fd_, who.data(), who.size(), 0) < 0) {
    // The text is only shown to waiters; the lock holds without it.
  }
  // The signal handler removes it, as it removes temporaries (the lock ends with the process).
  registration_ = TempRegistration(lock_path_);
}

void FileLock::release() {
  if (fd_ < 0) return;
  // Removed while still locked: a waiter that got the lock of this inode sees it gone and
  // retries on the path, which the next holder creates anew.
  ::unlink(lock_path_.c_str());
  registration_.reset();
  ::close(fd_);
  fd_ = -1;
}

FileLock::~FileLock() { release(); }

}  // namespace tdiff
