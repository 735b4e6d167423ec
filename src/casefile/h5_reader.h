#pragma once
// Reading tensors from HDF5 files: any dump whose datasets are tensors (case files,
// transformers capture dumps) can be listed and read with these. Errors name the file and
// the dataset and throw InputError.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

namespace h5 {
class Hid;
}

// An HDF5 file held open for reading. Every read through it sees the file it opened, even
// after the path was replaced (`tdiff golden` writes a new case beside it and renames it into
// place): a command that reads a case through one H5File judges against one reference, never
// a mix of two, and never finds a dataset "missing" halfway. Copies share the open file.
class H5File {
 public:
  // InputError naming the file when it cannot be opened (open_read's messages).
  explicit H5File(const std::string& path);
  const std::string& path() const { return path_; }
  std::int64_t id() const;  // the HDF5 file identifier (hid_t)

 private:
  std::string path_;
  std::shared_ptr<const h5::Hid> handle_;
};

// Each function below that takes a path opens the file for that one call; the H5File
// overloads read the file that handle holds.

// Full dataset paths under `group` (recursively), sorted, e.g. "/reference/L00.attn.core/o".
std::vector<std::string> h5_list_datasets(const std::string& file, const std::string& group = "/");
bool h5_exists(const std::string& file, const std::string& path);
bool h5_exists(const H5File& file, const std::string& path);
// Reads a dataset; HDF5 float64/32/16, int64/32, uint8 and bool (enum or uint8) map to DType.
// bf16 is stored as uint16 with the attribute dtype="bf16" (HDF5 has no bf16 type).
Tensor h5_read(const std::string& file, const std::string& path);
Tensor h5_read(const H5File& file, const std::string& path);
std::map<std::string, std::string> h5_read_attrs(const std::string& file, const std::string& path);
std::map<std::string, std::string> h5_read_attrs(const H5File& file, const std::string& path);
// A dataset's dtype and shape as h5_read would give them, without reading its data.
struct H5DatasetInfo {
  DType dtype;
  Shape shape;
  // 2-byte unsigned integers with no dtype attribute, read as i64: what numpy writes of bf16
  // or f16 bit patterns viewed as uint16, for a message to name the missing attribute.
  bool untagged_u16 = false;
};
H5DatasetInfo h5_dataset_info(const std::string& file, const std::string& path);
H5DatasetInfo h5_dataset_info(const H5File& file, const std::string& path);
// The direct children of an HDF5 group, sorted.
std::vector<std::string> h5_list_children(const std::string& file, const std::string& group);
std::vector<std::string> h5_list_children(const H5File& file, const std::string& group);

}  // namespace tdiff
