// A golden prompt set's suite.toml through load_suite. The folder also holds a valid token
// file (golden.txt, four prompts on the tiny model's vocabulary 0..255) and thresholds file,
// so inputs naming them get past the file checks to the cases' prompt and padding checks.
#include <filesystem>

#include "app/ci_suite.h"
#include "fuzz/fuzz_common.h"

namespace {

const std::string& suite_dir() {
  static const std::string dir = [] {
    const auto d = tdiff::fuzz::scratch_dir() / "suite";
    std::filesystem::create_directories(d);
    tdiff::fuzz::write_file("suite/golden.txt", "0\n255 255\n0 255 0\n\n1 2 3 4 5 6 7 8 9\n");
    tdiff::fuzz::write_file("suite/thresholds.toml", "[default]\nmax_abs_warn = 5e-3\n");
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string dir = suite_dir();
  // Written in place (std::filesystem::copy_file, used before, gives up on EINTR from
  // libFuzzer's own timer signal: a crash of the harness, not of tdiff).
  fuzz::write_file("suite/suite.toml", fuzz::as_text(data, size));
  fuzz::expect_input_errors([&] {
    const Suite s = load_suite(dir);
    std::uint64_t sum = s.hash.size();
    for (const auto& c : s.cases) sum += c.prompts.size() + static_cast<std::uint64_t>(c.pad_to);
    fuzz::sink = sum;
  });
  return 0;
}
