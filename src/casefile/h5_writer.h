#pragma once
// Writing tensors and string attributes to HDF5 files, atomically: a new file, or an update of
// an existing one (a case file). Errors name the file and throw InputError.
#include <string>

#include "base/tensor.h"

namespace tdiff {

// An HDF5 file open for writing. Writes go to a temporary file beside `path` (an AtomicFile,
// base/atomic_file.h); commit() renames it over `path`; destruction without commit() removes
// the temporary, so an interrupted write never leaves a damaged or half-written file. Every
// file it writes has a 512-byte HDF5 user block holding the integrity record (base/file_seal.h),
// written by commit() once HDF5 has closed the file; readers check it before HDF5 parses it.
class H5Writer {
 public:
  // How an update starts from its source file. objects: each top-level object is copied
  // (H5Ocopy) when first touched or at commit, and one replaced whole is never copied, so a
  // file updated many times (golden's new /reference) keeps no dead space. bytes: the whole
  // file is copied by the kernel (copy_file_range) and changed in place: several times faster
  // for a small change to a large file (a run's record beside GBs of reference), but what the
  // update deletes stays behind as dead space.
  enum class Copy { objects, bytes };
  // `copy_from` non-empty: start from a copy of that file (to update a case file in place).
  explicit H5Writer(const std::string& path, const std::string& copy_from = "", Copy copy = Copy::objects);
  // The checks the constructor makes before an update of `path` in place, without copying
  // anything: the folder exists and may be written, the file is not read-only, its copy fits
  // on the disk. For commands that record at their end (CaseUpdate::check).
  static void check_update(const std::string& path);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;
  // Creates intermediate groups; replaces an existing dataset of the same path.
  // Large integer and bool tensors (masks, ids) are chunked and compressed (gzip level 1, shuffle).
  void write(const std::string& path, const Tensor& t);
  void set_attr(const std::string& path, const std::string& name, const std::string& value);
  void remove(const std::string& path);  // a dataset or group, if present
  void remove_attr(const std::string& path, const std::string& name);  // if present
  void commit();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace tdiff
