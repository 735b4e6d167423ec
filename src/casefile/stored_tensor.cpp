#include "casefile/stored_tensor.h"

#include "base/error.h"

namespace tdiff {

namespace {

const TensorSpec& spec_of(const H5File& file, const std::string& dataset, const std::string& key,
                          const TensorContract& contract) {
  const TensorSpec* spec = contract.find(key);
  if (!spec)
    input_error("{}: dataset '{}' is not an output of a stage of the case's model (`tdiff info CASE --stages` "
                "lists them)",
                file.path(), dataset);
  return *spec;
}

}  // namespace

std::string stage_dataset(const std::string& group, const std::string& key) {
  std::string g = group;
  while (!g.empty() && g.back() == '/') g.pop_back();
  return g + "/" + key;
}

void check_stage_tensor(const H5File& file, const std::string& group, const std::string& key,
                        const TensorContract& contract, StoredBy by) {
  const std::string dataset = stage_dataset(group, key);
  const TensorSpec& spec = spec_of(file, dataset, key, contract);
  const H5DatasetInfo info = h5_dataset_info(file, dataset);
  TensorContract::check_layout(spec, info.dtype, info.shape, by, file.path(), dataset);
}

Tensor read_stage_tensor(const H5File& file, const std::string& group, const std::string& key,
                         const TensorContract& contract, StoredBy by) {
  // The layout before the data: a dataset that declares another shape is never read.
  check_stage_tensor(file, group, key, contract, by);
  const std::string dataset = stage_dataset(group, key);
  const TensorSpec& spec = *contract.find(key);
  Tensor t = h5_read(file, dataset);
  TensorContract::check_values(spec, t, file.path(), dataset);
  return t.shape() == spec.shape() ? t : t.reshaped(spec.shape());
}

}  // namespace tdiff
