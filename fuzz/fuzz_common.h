#pragma once
// Shared by the libFuzzer targets: the input written to a file (tdiff's loaders take paths),
// and the rule every target follows: an InputError is the expected answer to bad input (the
// CLI prints it and exits 2); any other exception escapes, and libFuzzer reports it as a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "base/error.h"

namespace tdiff::fuzz {

// A folder of this process's own under $TMPDIR, made on first use and reused for every input
// (several fuzzers, or -jobs=N workers, never share one).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("tdiff-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name (truncating) and returns the path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("fuzz: cannot write " + path.string());  // the harness's fault: a crash
  return path.string();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Where targets store what they read, so the compiler cannot drop the reads.
inline volatile std::uint64_t sink = 0;

// Runs `load`; an InputError is the loader refusing bad input, as it should.
template <class F>
void expect_input_errors(F&& load) {
  try {
    load();
  } catch (const InputError&) {
  }
}

}  // namespace tdiff::fuzz
