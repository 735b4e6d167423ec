#pragma once
// Running the built tdiff binary from tests: exit code, stdout and stderr, in a folder of the
// test's own that is removed afterwards.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace tdiff::testing {

struct CliResult {
  int code;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

// Every name under `dir`, recursively, sorted (what a command left behind).
inline std::vector<std::string> listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(std::filesystem::relative(it->path(), dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

// A fixture with a scratch folder and `run("golden case.h5")`.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("tdiff_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  CliResult run(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = std::system(fmt::format("'{}' {} >'{}' 2>'{}'", TDIFF_BIN, args, out, err).c_str());
    CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
  }

  std::filesystem::path dir_;
};

}  // namespace tdiff::testing
