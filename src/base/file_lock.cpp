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

// True when `fd` is still the file at `path` (its holder did not remove it meanwhile). lstat:
// a link put in its place is not the lock file.
bool still_at(int fd, const std::string& path) {
  struct stat held {}, named {};
  return fstat(fd, &held) == 0 && lstat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
         held.st_dev == named.st_dev;
}

// Opens the lock file, creating it: never through a symbolic link (one planted at the name
// would make the holder truncate its target), and read-only where the file is another user's
// (flock needs no write permission; mode 0666 less the umask lets a shared folder's group in).
int open_lock_file(const std::string& target, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0 && errno == EACCES) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (err == ELOOP) input_error("{}: its lock file {} is a symbolic link; tdiff does not follow it (remove it)", target, path);
    input_error("{}: cannot create a lock file in '{}' ({})", target, dir.empty() ? "." : dir, std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    input_error("{}: its lock file {} is not a regular file (remove it)", target, path);
  }
  return fd;
}

// Blocks until `fd` is locked; with `say`, says who holds it (once per command: not again on a
// retry).
void lock_waiting(int fd, const std::string& target, const std::string& path, bool say) {
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return;
  if (say) fmt::print(stderr, "waiting for {}: {} is updating it\n", target, holder_of(fd));
  int rc;
  while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    input_error("{}: cannot lock {} ({})", target, path, std::strerror(err));
  }
}

}  // namespace

std::string FileLock::lock_path_for(const std::string& target) {
  // One lock per file, however it is named: a link or another spelling of the path locks the
  // same lock file.
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(target, ec);
  if (ec) p = target;
  return (p.parent_path() / ("." + p.filename().string() + ".tdiff.lock")).string();
}

FileLock::FileLock(const std::string& target, const std::string& command)
    : target_(target), lock_path_(lock_path_for(target)) {
  for (bool retry = false;; retry = true) {
    const int fd = open_lock_file(target, lock_path_);
    lock_waiting(fd, target, lock_path_, !retry);
    if (still_at(fd, lock_path_)) {
      fd_ = fd;
      break;
    }
    ::close(fd);  // its holder removed it on release: lock the one at the path now
  }
  try {
    // The signal handler removes it, as it removes temporaries (the lock ends with the process).
    registration_ = TempRegistration(lock_path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  const std::string who = fmt::format("pid {}: {}\n", ::getpid(), command);
  if (ftruncate(fd_, 0) == 0 && pwrite(fd_, who.data(), who.size(), 0) < 0) {
    // Read-only (another user's file) or full: the text is only shown to waiters.
  }
}

void FileLock::release() {
  if (fd_ < 0) return;
  // Forgotten by the signal handler first: between the two, a signal would otherwise remove
  // the next holder's file. Then removed while still locked: a waiter that got the lock of
  // this inode sees it gone and retries on the path, which the next holder creates anew.
  registration_.reset();
  ::unlink(lock_path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

FileLock::~FileLock() { release(); }

}  // namespace tdiff
