#include "casefile/stored_tensor.h"

#include <cmath>
#include <cstdlib>

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
  try {
    TensorContract::check_layout(spec, info.dtype, info.shape, by, file.path(), dataset);
  } catch (const InputError& e) {
    if (!info.untagged_u16 || spec.value != ValueClass::floating) throw;
    throw InputError(fmt::format("{} (it holds uint16 without a dtype attribute: bf16 or f16 bit patterns need "
                                 "attrs['dtype'] = 'bf16' or 'f16', as tdiff-capture and the tap write them)",
                                 e.what()));
  }
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

Shape conditioning_shape(const Shape& shape) {
  if (shape.size() < 2) return {1};
  Shape s = shape;
  s.back() = 1;
  return s;
}

std::optional<StoredConditioning> read_conditioning(const H5File& file, const std::string& key,
                                                    const TensorContract& contract) {
  const std::string dataset = "/conditioning/" + key;
  if (!h5_exists(file, dataset)) return std::nullopt;
  const TensorSpec& spec = spec_of(file, dataset, key, contract);
  const Shape want = conditioning_shape(spec.shape());
  const H5DatasetInfo info = h5_dataset_info(file, dataset);
  if (info.dtype != DType::f32 || info.shape != want)
    input_error("{}: dataset '{}' is {} {}, expected f32 {} (the row gains of {}; `tdiff golden` rewrites them)",
                file.path(), dataset, dtype_name(info.dtype), shape_str(info.shape), shape_str(want), key);
  StoredConditioning c;
  c.row_gain = h5_read(file, dataset);
  const auto attrs = h5_read_attrs(file, dataset);
  const auto g = attrs.find("gain_l2");
  char* end = nullptr;
  c.gain_l2 = g == attrs.end() ? NAN : std::strtod(g->second.c_str(), &end);
  if (g == attrs.end() || end == g->second.c_str() || *end || !std::isfinite(c.gain_l2) || c.gain_l2 < 1.0)
    input_error("{}: dataset '{}' needs an attribute gain_l2, a finite number >= 1", file.path(), dataset);
  for (const float v : c.row_gain.span<const float>())
    if (!(std::isfinite(v) && v >= 1.0f))
      input_error("{}: dataset '{}' holds a row gain of {}, expected a finite number >= 1", file.path(), dataset, v);
  return c;
}

}  // namespace tdiff
