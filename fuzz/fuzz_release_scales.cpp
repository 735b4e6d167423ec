// Release-format quantised weights (formats/release_format.h): a safetensors file holding
// "weight" and "scale" as the release stores them, dequantised as the release loader does.
// An F8_E4M3 weight goes through dequantize_fp8 (block scales [ceil(O/128), ceil(K/128)],
// F8_E8M0 or F32); any other weight through dequantize_fp4 (I8 codes two to a byte, scales
// [O, ceil(K/32)]), with K, the column count the config implies, from the metadata key
// "columns" (absent: twice the packed width, as for every release expert).
#include <charconv>
#include <vector>

#include "formats/release_format.h"
#include "formats/safetensors.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string path = fuzz::write_file("release.safetensors", fuzz::as_text(data, size));
  fuzz::expect_input_errors([&] {
    SafetensorsFile f(path);
    if (!f.has("weight") || !f.has("scale")) return;
    const Tensor w = f.tensor("weight"), s = f.tensor("scale");
    if (f.info("weight").format == "F8_E4M3") {
      const Tensor out = dequantize_fp8(w, s, "fuzz weight");
      fuzz::sink = static_cast<std::uint64_t>(out.numel());
      return;
    }
    std::int64_t K = w.rank() == 2 && w.dim(1) <= (std::int64_t{1} << 40) ? 2 * w.dim(1) : 0;
    if (auto it = f.metadata().find("columns"); it != f.metadata().end()) {
      const auto& t = it->second;
      if (std::from_chars(t.data(), t.data() + t.size(), K).ec != std::errc()) return;
    }
    // The output buffer as the loader sizes it, from the weight's rows and K; only a weight of
    // matching shape gets through dequantize_fp4's checks to write it.
    const std::int64_t rows = w.rank() == 2 ? w.dim(0) : 0;
    if (rows < 0 || K < 0 || (K > 0 && rows > (std::int64_t{1} << 24) / K)) return;
    std::vector<double> out(static_cast<std::size_t>(rows * K));
    dequantize_fp4(w, s, K, out.data(), "fuzz expert");
    fuzz::sink = out.size();
  });
  return 0;
}
