// `tdiff case new` twice on one model folder: the second takes every weight file's SHA-256 from
// the folder's checksum cache (stderr says how many files it hashed), records the same
// checksums, and --rehash hashes every file again.
#include <cstdlib>
#include <optional>
#include <regex>

#include "base/sha256.h"
#include "casefile/case_file.h"
#include "cli_support.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ChecksumCacheCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    // The user's cache (used when the folder cannot be written) inside the test's folder.
    if (const char* x = std::getenv("XDG_CACHE_HOME")) saved_xdg_ = x;
    ::setenv("XDG_CACHE_HOME", path("xdg").c_str(), 1);
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 3 -o '{}'", path("m"))).code, 0);
    // A file modified within 2 s of its hash is not cached (a rewrite in the same tick of the
    // file system's clock would go unseen): date the weights as a download of an hour ago.
    for (const auto& e : fs::directory_iterator(path("m")))
      if (e.path().extension() == ".safetensors") {
        fs::last_write_time(e.path(), fs::file_time_type::clock::now() - 3600s);
        ++weight_files_;
      }
  }
  void TearDown() override {
    if (saved_xdg_) ::setenv("XDG_CACHE_HOME", saved_xdg_->c_str(), 1);
    else ::unsetenv("XDG_CACHE_HOME");
    CliTest::TearDown();
  }
  testing::CliResult case_new(const std::string& out, const std::string& more = "") const {
    return run(fmt::format("case new --model '{}' --random-prompts 2 --len 8 --seed 4 -o '{}' {}", path("m"), path(out), more));
  }
  // The "checksums: H of N files hashed (C from the cache...)" line: H and C.
  static std::pair<int, int> hashed_and_cached(const std::string& err) {
    std::smatch m;
    static const std::regex line(R"(checksums: (\d+) of (\d+) files hashed \((\d+) from the cache)");
    if (!std::regex_search(err, m, line)) return {-1, -1};
    return {std::stoi(m[1]), std::stoi(m[3])};
  }

  int weight_files_ = 0;
  std::optional<std::string> saved_xdg_;
};

TEST_F(ChecksumCacheCli, SecondCaseNewHashesNothing) {
  ASSERT_GE(weight_files_, 1);
  const auto first = case_new("a.h5");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(hashed_and_cached(first.err), std::make_pair(weight_files_, 0)) << first.err;
  EXPECT_TRUE(fs::is_regular_file(path("m/.tdiff-checksums.json")));

  const auto second = case_new("b.h5");
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(hashed_and_cached(second.err), std::make_pair(0, weight_files_)) << second.err;
  EXPECT_NE(second.err.find(fmt::format("checksums: 0 of {0} files hashed ({0} from the cache)", weight_files_)),
            std::string::npos)
      << second.err;
  // stdout is as it was: the one line about the case.
  EXPECT_EQ(testing::count_lines(second.out), 1u) << second.out;

  const CaseInfo a = read_case(path("a.h5")), b = read_case(path("b.h5"));
  EXPECT_EQ(a.checksums, b.checksums);
  EXPECT_EQ(a.checksums.size(), static_cast<std::size_t>(weight_files_));
  for (const auto& [name, sum] : b.checksums) EXPECT_EQ(sum, file_sha256(path("m/" + name))) << name;

  const auto again = case_new("c.h5", "--rehash");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(hashed_and_cached(again.err), std::make_pair(weight_files_, 0)) << again.err;
  EXPECT_EQ(read_case(path("c.h5")).checksums, a.checksums);
}

// A weight file changed under the cache (same size, new bytes, new time) is hashed again and
// the case records its new checksum.
TEST_F(ChecksumCacheCli, ChangedWeightsAreHashedAgain) {
  ASSERT_EQ(case_new("a.h5").code, 0);
  const std::string w = path("m/model.safetensors");
  ASSERT_TRUE(fs::exists(w));
  {
    // The lowest bit of the first data byte: the low mantissa byte of lm_head.weight's first
    // F32, so the file stays valid and finite (the size and inode stay too).
    std::fstream f(w, std::ios::in | std::ios::out | std::ios::binary);
    unsigned char len[8] = {};
    f.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= std::uint64_t{len[i]} << (8 * i);
    const auto at = static_cast<std::streamoff>(8 + header);
    f.seekg(at);
    const int byte = f.get();
    f.seekp(at);
    f.put(static_cast<char>(byte ^ 1));
  }
  fs::last_write_time(w, fs::file_time_type::clock::now() - 1800s);
  const auto r = case_new("b.h5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(hashed_and_cached(r.err).first, 1) << r.err;
  EXPECT_EQ(read_case(path("b.h5")).checksums.at("model.safetensors"), file_sha256(w));
  EXPECT_NE(read_case(path("a.h5")).checksums.at("model.safetensors"), file_sha256(w));
}

}  // namespace
}  // namespace tdiff
