// Numerics policies, verdict thresholds and their command-line strings. The first byte picks
// the loader, the rest is its input:
//   0 policy file .toml   1 policy file .json   2 --set PATTERN:knob=value
//   3 thresholds .toml    4 --rule / --set PATTERN:key=value,...
// What loads is then used as a run uses it, on the tiny model's stages: patterns checked
// against the stage list, every stage's numerics and thresholds resolved.
#include <vector>

#include "numerics/policy.h"
#include "model/stage_graph.h"
#include "synth/synth.h"
#include "diff/thresholds.h"
#include "fuzz/fuzz_common.h"

namespace {

const std::vector<tdiff::Stage>& tiny_stages() {
  static const auto stages = tdiff::build_stages(tdiff::synth_preset("tiny"));
  return stages;
}

void use(const tdiff::Policy& p) {
  p.validate(tiny_stages());
  std::uint64_t sum = p.describe().size();
  for (const auto& s : tiny_stages()) sum += static_cast<std::uint64_t>(p.resolve(s.name).matmul_accum);
  tdiff::fuzz::sink = sum;
}

void use(const tdiff::ThresholdPolicy& t) {
  std::vector<std::string> names;
  for (const auto& s : tiny_stages()) names.push_back(s.name);
  t.check_patterns(names);
  double sum = 0;
  for (const auto& s : tiny_stages())
    for (const auto& out : s.outputs) sum += t.for_tensor(s.name, out).cosine_fail;
  tdiff::fuzz::sink = static_cast<std::uint64_t>(sum);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  if (size == 0) return 0;
  const std::string text(fuzz::as_text(data + 1, size - 1));
  fuzz::expect_input_errors([&] {
    switch (data[0] % 5) {
      case 0: use(Policy::load(fuzz::write_file("policy.toml", text))); break;
      case 1: use(Policy::load(fuzz::write_file("policy.json", text))); break;
      case 2: {
        Policy p = Policy::preset("fixed");
        p.add_set(text);
        use(p);
        break;
      }
      case 3: use(load_thresholds(fuzz::write_file("thresholds.toml", text))); break;
      default: {
        ThresholdPolicy t;
        add_threshold_override(t, text);
        use(t);
      }
    }
  });
  return 0;
}
