// config.json through load_config, then what every command does next with a config: the
// dimension checks, the list of expected weights with their shapes, the JSON written back
// into case files, and the --layers selection a synth or info run may apply.
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/stage_graph.h"
#include "formats/weights.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string path = fuzz::write_file("config.json", fuzz::as_text(data, size));
  fuzz::expect_input_errors([&] {
    ModelConfig c = load_config(path);
    c.validate(path);
    std::uint64_t sum = 0;
    for (const auto& [name, spec] : expected_weights(c)) sum += name.size() + spec.shape.size();
    sum += config_to_json(c).dump().size();
    sum += build_stages(c).size();
    fuzz::sink = sum;
  });
  return 0;
}
