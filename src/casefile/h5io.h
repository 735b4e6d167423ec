#pragma once
// Generic HDF5 access for tensors: any dump whose datasets are tensors (case files,
// transformers capture dumps) can be listed, read and written with these.
// Errors name the file and the dataset and throw InputError.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

// Full dataset paths under `group` (recursively), sorted, e.g. "/reference/L00.attn.core/o".
std::vector<std::string> h5_list_datasets(const std::string& file, const std::string& group = "/");
bool h5_exists(const std::string& file, const std::string& path);
// Reads a dataset; HDF5 float64/32/16, int64/32, uint8 and bool (enum or uint8) map to DType.
// bf16 is stored as uint16 with the attribute dtype="bf16" (HDF5 has no bf16 type).
Tensor h5_read(const std::string& file, const std::string& path);
std::map<std::string, std::string> h5_read_attrs(const std::string& file, const std::string& path);
// A dataset's dtype and shape as h5_read would give them, without reading its data.
struct H5DatasetInfo {
  DType dtype;
  Shape shape;
};
H5DatasetInfo h5_dataset_info(const std::string& file, const std::string& path);
// The direct children of an HDF5 group, sorted.
std::vector<std::string> h5_list_children(const std::string& file, const std::string& group);

// An HDF5 file open for writing. Writes go to a temporary file beside `path`; commit()
// renames it over `path` (atomic); destruction without commit() removes the temporary, so an
// interrupted write never leaves a damaged or half-written file.
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
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;
  // Creates intermediate groups; replaces an existing dataset of the same path.
  // Large tensors are chunked and compressed (gzip level 1, shuffle).
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
