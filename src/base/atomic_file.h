#pragma once
// Files and folders replaced whole or not at all: the new content is written to a temporary
// beside the target (same folder, so the rename never crosses file systems; named and
// cleaned up as base/temp_files.h says), synced, and renamed into place by commit().
// Destroyed without commit() (an exception, a failed write), the temporary is removed and the
// target is as it was. Every constructor first removes the stale temporaries of its folder.
// Errors are InputErrors naming the target and the system's reason.
#include <cstddef>
#include <string>

#include "base/temp_files.h"

namespace tdiff {

// One file. Write through write(), or by name to temp_path() (HDF5 opens files by name);
// commit() gives the temporary the target's mode (and, for root, its owner) when the target
// exists, else the mode the umask leaves of 0666, and renames it onto the target.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }
  void write(const void* data, std::size_t n);  // appends all `n` bytes
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  void commit();  // fsync, mode, rename, fsync of the folder

 private:
  std::string target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  TempRegistration registration_;
};

// One folder: fill temp_path() (its files synced or written with write_new_file), then
// commit() puts it in the target's place. An existing target is exchanged with it in one
// step (renameat2 RENAME_EXCHANGE) where the file system can, else moved aside and the new
// one moved in (signals deferred between the two renames, the old one put back if the second
// fails); the old folder is then removed. The new folder keeps an existing target's mode.
// The caller decides whether the target may be replaced (AtomicFolder replaces any folder).
class AtomicFolder {
 public:
  explicit AtomicFolder(std::string target);
  ~AtomicFolder();
  AtomicFolder(const AtomicFolder&) = delete;
  AtomicFolder& operator=(const AtomicFolder&) = delete;

  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }
  void commit();

 private:
  void swap_in();  // the target exists
  std::string target_, temp_;
  bool committed_ = false;
  TempRegistration registration_;
};

// Writes `content` to a new file `path` (created or truncated), fsync'd: for the files inside
// an AtomicFolder's temporary. Errors name `shown` (the file's final path) rather than `path`.
void write_new_file(const std::string& path, const std::string& content, const std::string& shown);

}  // namespace tdiff
