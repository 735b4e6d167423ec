// A safetensors file (8-byte header length, JSON header, data block) through SafetensorsFile:
// the header checks, then every tensor viewed and its bytes read, so a range the checks let
// through that lies outside the mapping is an ASan report.
#include "formats/safetensors.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string path = fuzz::write_file("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_input_errors([&] {
    SafetensorsFile f(path);
    std::uint64_t sum = 0;
    for (const auto& name : f.names()) {
      const Tensor t = f.tensor(name);
      const std::byte* bytes = t.raw();
      for (std::size_t i = 0; i < t.nbytes(); ++i) sum += static_cast<std::uint8_t>(bytes[i]);
    }
    for (const auto& [k, v] : f.metadata()) sum += k.size() + v.size();
    fuzz::sink = sum;
  });
  return 0;
}
