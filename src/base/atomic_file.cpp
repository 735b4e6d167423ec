#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace tdiff {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err = errno) { return std::strerror(err); }

fs::path folder_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }

// Writes all of `n` bytes to `fd`; an InputError naming `shown` when it cannot.
void write_all(int fd, const void* data, std::size_t n, const std::string& shown) {
  const auto* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) input_error("cannot write {} ({})", shown, errno_text(w < 0 ? errno : EIO));
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

// fsync, where the file system can (EINVAL: a special file that cannot sync).
bool sync_fd(int fd) { return ::fsync(fd) == 0 || errno == EINVAL; }

// A rename is durable once its folder is synced; a folder that cannot be opened or synced
// (some network file systems) is left to the system.
void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The regular files directly in `dir`, then `dir` itself, synced: a folder renamed into place
// holds its files' data even after a crash. Files already synced cost next to nothing.
void sync_folder_files(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const bool ok = sync_fd(fd);
    const int err = errno;
    ::close(fd);
    if (!ok) input_error("cannot write {} ({})", it->path().string(), errno_text(err));
  }
  sync_folder(dir);
}

}  // namespace

// ---- AtomicFile --------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
  const fs::path dir = folder_of(target_);
  remove_stale_temporaries(dir.string());
  temp_ = temp_name(target_);
  registration_ = TempRegistration(temp_);  // before it exists: a signal never leaves it behind
  // Created with open(2), so that a full disk or a folder that may not be written gets the
  // system's own reason; 0666 leaves the umask to decide the mode of a new file.
  fd_ = ::open(temp_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    std::error_code ec;
    input_error("{}: cannot create a temporary file in '{}' ({})", target_, fs::absolute(dir, ec).string(), errno_text());
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (committed_) throw std::logic_error("AtomicFile written after commit(): " + target_);
  write_all(fd_, data, n, target_);
}

void AtomicFile::commit() {
  if (committed_) throw std::logic_error("AtomicFile committed twice: " + target_);
  // The data must be on disk before the rename makes it the real file.
  if (!sync_fd(fd_)) input_error("cannot write {} ({})", target_, errno_text());
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (::fchmod(fd_, st.st_mode & 07777) != 0)
      input_error("{}: cannot give the new file the old one's mode {:04o} ({})", target_, st.st_mode & 07777,
                  errno_text());
    if (::geteuid() == 0 && ::fchown(fd_, st.st_uid, st.st_gid) != 0)
      input_error("{}: cannot give the new file the old one's owner ({})", target_, errno_text());
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) input_error("cannot write {} ({})", target_, errno_text());
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    input_error("{}: cannot rename {} onto it ({})", target_, temp_, errno_text());
  committed_ = true;
  registration_.reset();
  sync_folder(folder_of(target_));
}

// ---- AtomicFolder ------------------------------------------------------------------------

AtomicFolder::AtomicFolder(std::string target) {
  fs::path t = fs::path(target).lexically_normal();
  if (!t.empty() && !t.has_filename()) t = t.parent_path();  // "out/" -> "out"
  if (t.empty() || t == ".") input_error("'{}': not a name for a new folder", target);
  target_ = t.string();
  const fs::path dir = folder_of(t);
  remove_stale_temporaries(dir.string());
  temp_ = temp_name(target_);
  registration_ = TempRegistration(temp_);
  if (::mkdir(temp_.c_str(), 0777) != 0) input_error("{}: cannot write in {} ({})", target_, dir.string(), errno_text());
}

AtomicFolder::~AtomicFolder() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

void AtomicFolder::commit() {
  if (committed_) throw std::logic_error("AtomicFolder committed twice: " + target_);
  sync_folder_files(temp_);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec))) {
    swap_in();
  } else if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    input_error("{}: cannot create ({})", target_, errno_text());
  }
  committed_ = true;
  registration_.reset();
  sync_folder(folder_of(target_));
}

void AtomicFolder::swap_in() {
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) ::chmod(temp_.c_str(), st.st_mode & 07777);
  std::error_code ec;
  if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(temp_, ec);  // now the old folder, still registered until it is gone
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP)
    input_error("{}: cannot replace ({})", target_, errno_text());
  // No exchange on this file system: move the old folder aside, the new one in.
  const std::string aside = temp_name(target_);
  TempRegistration aside_registration;
  {
    SignalDeferral not_now;  // a signal between the two renames would leave no folder at all
    if (::rename(target_.c_str(), aside.c_str()) != 0) input_error("{}: cannot replace ({})", target_, errno_text());
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      if (::rename(aside.c_str(), target_.c_str()) != 0)
        input_error("{}: cannot replace ({}); the old folder is now {}: rename it back", target_, errno_text(err), aside);
      input_error("{}: cannot replace ({})", target_, errno_text(err));
    }
    aside_registration = TempRegistration(aside);
  }
  fs::remove_all(aside, ec);
}

void write_new_file(const std::string& path, const std::string& content, const std::string& shown) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) input_error("cannot write {} ({})", shown, errno_text());
  try {
    write_all(fd, content.data(), content.size(), shown);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const bool ok = sync_fd(fd);
  const int err = errno;
  if (::close(fd) != 0 || !ok) input_error("cannot write {} ({})", shown, errno_text(ok ? errno : err));
}

}  // namespace tdiff
