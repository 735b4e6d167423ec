#pragma once
// Reading tensors from HDF5 files: any dump whose datasets are tensors (case files,
// transformers capture dumps) can be listed and read with these. Errors name the file and
// the dataset and throw InputError.
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

}  // namespace tdiff
