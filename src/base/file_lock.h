#pragma once
// An exclusive lock on a file that tdiff updates by replacing it (base/atomic_file.h): the
// update reads the file, writes a new one beside it and renames it into place, so two
// updates at once would each start from the old file and one of them would be lost. The lock
// serialises them across processes.
//
// The lock is not taken on the file itself: a rename replaces its inode, and libhdf5 takes
// its own flock on the files it opens (a reader would be refused while a writer held one).
// It is a hidden file beside the target, `.<name>.tdiff.lock`, locked with flock(2) and
// removed by its holder on release. A waiter that wakes up on a lock file its holder removed
// (the path is gone or names another inode) tries again, so exactly one process at a time
// holds the lock of a path, and no lock file is left behind. The file holds the holder's pid
// and command, which a waiter prints once while it waits. flock locks end with their process,
// so a killed holder never leaves a lock held.
#include <string>

#include "base/temp_files.h"

namespace tdiff {

class FileLock {
 public:
  // Blocks until the lock of `target` is held. `command` is what the holder is doing
  // ("tdiff run"), shown to waiters. An InputError when the lock file cannot be created
  // (a folder that may not be written names the folder and the reason).
  FileLock(const std::string& target, const std::string& command);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Lets go early (after the update's rename); the destructor does it otherwise.
  void release();
  bool held() const { return fd_ >= 0; }
  const std::string& lock_path() const { return lock_path_; }

  // `.<name>.tdiff.lock` beside `target`.
  static std::string lock_path_for(const std::string& target);

 private:
  std::string target_, lock_path_;
  int fd_ = -1;
  TempRegistration registration_;
};

}  // namespace tdiff
