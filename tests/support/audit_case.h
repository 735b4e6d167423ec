#pragma once
// The precision audit's case: the tiny model and 128 tokens (two KV blocks, CSA/HCA entries,
// the indexer selecting among exact ties), built once per test binary, for the audit tests
// in the library and through the binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "emu_case.h"

namespace tdiff::testing {

namespace fs = std::filesystem;

// The line of `text` that starts with "knob ".
inline std::string knob_line(const std::string& text, const std::string& knob) {
  const auto p = text.find("\n" + knob + " ");
  return p == std::string::npos ? "" : text.substr(p + 1, text.find('\n', p + 1) - p - 1);
}

class AuditCase : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-audit-{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const ModelConfig tiny = synth_preset("tiny");
    // 128 tokens: two KV blocks, CSA/HCA entries, the indexer selecting among exact ties.
    const auto c = cached_golden_case("audit", [&](const fs::path& d) {
      build_golden_case(d, tiny, 1, {random_ids(128, tiny.vocab_size, 31)}, 128);
    });
    case_ = new CachedCase(c);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete case_;
  }
  static CaseSession session() { return open_session(case_->path, case_->model); }
  // The case and its model folder, for command lines.
  static std::string args() { return case_->path + " --model " + case_->model; }
  static std::string read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static inline fs::path* dir_ = nullptr;
  static inline CachedCase* case_ = nullptr;
};

}  // namespace tdiff::testing
