// bench/refcpu/reference_size: the bytes of a case's float64 reference, computed from the stage
// shapes of the tensor contract (model/tensor_contract.h), for every stage (golden --store all) and
// for the layer boundaries (golden --store boundaries), with the row gains of the conditioning
// that both store beside them. No model and no case are needed: a preset's config (or the
// first K layers of it) at B rows of S tokens.
//   build/bench/refcpu/reference_size [--preset v4-flash-dims] [--tokens 4096] [--rows 1] [--layers K]
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "casefile/reference_layers.h"
#include "casefile/stored_tensor.h"
#include "model/tensor_contract.h"
#include "synth/synth.h"

using namespace tdiff;

namespace {

// What golden writes for one output: f64 values and i64 ids (8 bytes), bool masks (1 byte), and
// for a float output its conditioning's f32 row gains.
double stored_bytes(const TensorSpec& spec) {
  return static_cast<double>(shape_numel(spec.shape())) * (spec.value == ValueClass::boolean ? 1 : 8);
}

double conditioning_bytes(const TensorSpec& spec) {
  return spec.value == ValueClass::floating ? 4.0 * static_cast<double>(shape_numel(conditioning_shape(spec.shape())))
                                            : 0;
}

std::string human(double bytes) {
  return bytes >= 1e9 ? fmt::format("{:.1f} GB", bytes / 1e9) : fmt::format("{:.2f} MB", bytes / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "v4-flash-dims";
  std::int64_t tokens = 4096, rows = 1, layers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--preset"))
      preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tokens"))
      tokens = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rows"))
      rows = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layers"))
      layers = std::stoll(argv[i + 1]);
  }
  ModelConfig c = synth_preset(preset);
  if (layers > 0 && layers < c.num_hidden_layers) {
    c.num_hidden_layers = layers;
    c.layer_types.resize(static_cast<std::size_t>(layers));
    c.mlp_types.resize(static_cast<std::size_t>(layers));
  }
  const auto stages = build_stages(c);
  const TensorContract contract(stages, c, rows, tokens);
  const auto names = boundary_stages(stages);
  const std::set<std::string> boundary(names.begin(), names.end());
  double all = 0, kept = 0, cond = 0;
  std::map<int, double> per_layer;
  std::map<std::string, int> layer;
  for (const auto& s : stages) layer[s.name] = s.layer;
  for (const auto& spec : contract.specs()) {
    const double b = stored_bytes(spec);
    all += b;
    cond += conditioning_bytes(spec);
    if (boundary.count(spec.stage)) kept += b;
    per_layer[layer.at(spec.stage)] += b;
  }
  fmt::print("{} layers of {} at {} row(s) x {} tokens: {} stages, {} of them stored by --store boundaries\n",
             c.num_hidden_layers, preset, rows, tokens, stages.size(), names.size());
  fmt::print("golden --store all         {:>10}  (stage outputs {} + conditioning {})\n", human(all + cond), human(all),
             human(cond));
  fmt::print("golden --store boundaries  {:>10}  (stage outputs {} + conditioning {})\n", human(kept + cond),
             human(kept), human(cond));
  double smallest = all, largest = 0;
  for (const auto& [l, b] : per_layer)
    if (l >= 0) smallest = std::min(smallest, b), largest = std::max(largest, b);
  fmt::print("outside the layers {}; one layer's outputs {} to {}\n", human(per_layer[-1]), human(smallest),
             human(largest));
  return 0;
}
