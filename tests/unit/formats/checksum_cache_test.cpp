// The folder's checksum cache (formats/checksum_cache.h): a file hashed once is taken from the
// cache while its size, time and inode stay; a rewritten file is hashed again; a damaged cache
// is ignored; a folder that cannot be written falls back to the user's cache, or to a note;
// commands saving at once leave a whole file; the weight check (golden, run) hashes whole
// whatever the cache says, and fills it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "formats/checksum_cache.h"
#include "formats/weight_files.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A fresh folder per test, with the user's cache folder inside it ($XDG_CACHE_HOME), so no test
// writes into the home folder.
class ChecksumCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("tdiff_cc_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    if (const char* x = std::getenv("XDG_CACHE_HOME")) saved_xdg_ = x;
    ::setenv("XDG_CACHE_HOME", (dir_ / "xdg").c_str(), 1);
  }
  void TearDown() override {
    if (saved_xdg_) ::setenv("XDG_CACHE_HOME", saved_xdg_->c_str(), 1);
    else ::unsetenv("XDG_CACHE_HOME");
    fs::remove_all(dir_);
  }
  std::string model(const std::string& f) const { return (dir_ / "model" / f).string(); }
  std::string folder() const { return (dir_ / "model").string(); }
  std::string folder_file() const { return model(".tdiff-checksums.json"); }

  // Writes `content` to `name` in the model folder and dates it `age` ago: a file only just
  // written is not cached (FileHash::cacheable), and a test must not wait for it to age.
  std::string write_weights(const std::string& name, const std::string& content, std::chrono::seconds age = 3600s) {
    const std::string p = model(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    fs::last_write_time(p, fs::file_time_type::clock::now() - age);
    return p;
  }

  fs::path dir_;
  std::optional<std::string> saved_xdg_;
};

TEST_F(ChecksumCacheTest, UnchangedFileComesFromTheCache) {
  const std::string a = write_weights("a.safetensors", std::string(100000, 'a'));
  const std::string b = write_weights("b.safetensors", "bbbb");
  ChecksumReport r;
  const auto first = weight_checksums({a, b}, {}, &r);
  EXPECT_EQ(first, (std::vector<std::string>{file_sha256(a), file_sha256(b)}));
  EXPECT_EQ(r.files, 2u);
  EXPECT_EQ(r.hashed, 2u);
  EXPECT_EQ(r.cached, 0u);
  EXPECT_EQ(r.hashed_bytes, 100004u);
  EXPECT_EQ(r.note, "");
  EXPECT_TRUE(fs::is_regular_file(folder_file()));

  const auto second = weight_checksums({a, b}, {}, &r);
  EXPECT_EQ(second, first);
  EXPECT_EQ(r.hashed, 0u);
  EXPECT_EQ(r.cached, 2u);
  EXPECT_EQ(r.summary(), "checksums: 0 of 2 files hashed (2 from the cache)");

  ChecksumOptions rehash;
  rehash.rehash = true;
  EXPECT_EQ(weight_checksums({a, b}, rehash, &r), first);
  EXPECT_EQ(r.hashed, 2u);
}

TEST_F(ChecksumCacheTest, RewrittenFileIsHashedAgain) {
  const std::string a = write_weights("a.safetensors", "old content", 3600s);
  ChecksumReport r;
  const std::string old_sum = weight_checksums({a}, {}, &r).at(0);
  const auto inode = file_identity(a).inode;
  // The same size and inode (rewritten in place), other bytes and another modification time.
  write_weights("a.safetensors", "new content", 1800s);
  ASSERT_EQ(file_identity(a).inode, inode);
  const std::string new_sum = weight_checksums({a}, {}, &r).at(0);
  EXPECT_EQ(r.hashed, 1u);
  EXPECT_NE(new_sum, old_sum);
  EXPECT_EQ(new_sum, file_sha256(a));
  // Now cached with the new identity.
  EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), new_sum);
  EXPECT_EQ(r.hashed, 0u);
}

TEST_F(ChecksumCacheTest, RestoredTimeFoolsTheCacheButNotRehash) {
  const std::string a = write_weights("a.safetensors", "old content");
  const auto when = fs::last_write_time(a);
  ChecksumReport r;
  const std::string old_sum = weight_checksums({a}, {}, &r).at(0);
  std::ofstream(a, std::ios::binary | std::ios::trunc) << "new content";
  fs::last_write_time(a, when);  // what the cache cannot see
  EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), old_sum);
  ChecksumOptions rehash;
  rehash.rehash = true;
  EXPECT_EQ(weight_checksums({a}, rehash, &r).at(0), file_sha256(a));
  EXPECT_EQ(r.hashed, 1u);
  // --rehash refreshed the cache.
  EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), file_sha256(a));
  EXPECT_EQ(r.hashed, 0u);
}

TEST_F(ChecksumCacheTest, FileModifiedJustBeforeItsHashIsNotCached) {
  const std::string a = write_weights("a.safetensors", "fresh", 0s);
  ChecksumReport r;
  weight_checksums({a}, {}, &r);
  EXPECT_EQ(r.recent, 1u);
  EXPECT_NE(r.summary().find("1 modified within 2 s of its hash, not cached"), std::string::npos) << r.summary();
  weight_checksums({a}, {}, &r);
  EXPECT_EQ(r.hashed, 1u);
}

TEST_F(ChecksumCacheTest, DamagedCacheIsIgnoredAndRewritten) {
  const std::string a = write_weights("a.safetensors", "content");
  ChecksumReport r;
  const std::string sum = weight_checksums({a}, {}, &r).at(0);
  const std::string good = [&] {
    std::ifstream in(folder_file());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const FileIdentity id = file_identity(a);
  const std::string entry = fmt::format(R"("size": {}, "mtime_ns": {}, "inode": {})", id.size, id.mtime_ns, id.inode);
  const std::vector<std::string> damaged = {
      good.substr(0, good.size() / 2),  // truncated
      "",
      "\x01\x02 not json",
      "[1, 2, 3]",
      R"({"format": "tdiff-checksums", "version": 2, "files": {}})",
      R"({"format": "tdiff-checksums", "version": 1, "files": []})",
      fmt::format(R"({{"format": "tdiff-checksums", "version": 1, "files": {{"a.safetensors": {{{}, "sha256": 7}}}}}})", entry),
      fmt::format(R"({{"format": "tdiff-checksums", "version": 1, "files": {{"a.safetensors": {{{}, "sha256": "xyz"}}}}}})", entry),
      fmt::format(R"({{"format": "tdiff-checksums", "version": 1, "files": {{"a.safetensors": {{"size": -1, "sha256": "{}"}}}}}})", sum),
  };
  for (const std::string& text : damaged) {
    std::ofstream(folder_file(), std::ios::binary | std::ios::trunc) << text;
    EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), sum) << text;
    EXPECT_EQ(r.hashed, 1u) << text;
    EXPECT_EQ(r.note, "") << text;
    // Rewritten whole: the next one takes it from the cache.
    EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), sum) << text;
    EXPECT_EQ(r.cached, 1u) << text;
  }
}

TEST_F(ChecksumCacheTest, UnwritableFolderFallsBackToTheUserCache) {
  // The folder's cache cannot be replaced: a folder stands where it would go (as root, a
  // read-only permission would not stop the write).
  fs::create_directories(folder_file());
  const std::string a = write_weights("a.safetensors", "content");
  ChecksumReport r;
  const std::string sum = weight_checksums({a}, {}, &r).at(0);
  EXPECT_EQ(r.note, "");
  const ChecksumCache cache(folder());
  ASSERT_NE(cache.user_file(), "");
  EXPECT_EQ(fs::path(cache.user_file()).parent_path(), dir_ / "xdg" / "tdiff");
  EXPECT_TRUE(fs::is_regular_file(cache.user_file()));
  EXPECT_EQ(cache.find("a.safetensors", file_identity(a)), sum);
  weight_checksums({a}, {}, &r);
  EXPECT_EQ(r.cached, 1u);
}

TEST_F(ChecksumCacheTest, NoWritableCacheIsANote) {
  fs::create_directories(folder_file());
  std::ofstream(dir_ / "not-a-folder") << "x";
  ::setenv("XDG_CACHE_HOME", (dir_ / "not-a-folder").c_str(), 1);
  const std::string a = write_weights("a.safetensors", "content");
  ChecksumReport r;
  EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), file_sha256(a));
  EXPECT_EQ(r.hashed, 1u);
  EXPECT_EQ(r.note.find("checksums of "), 0u) << r.note;
  EXPECT_NE(r.note.find("not cached"), std::string::npos) << r.note;
  EXPECT_EQ(r.note.find('\n'), std::string::npos) << r.note;
}

TEST_F(ChecksumCacheTest, ProcessesSavingAtOnceLeaveAWholeFile) {
  const std::string a = write_weights("a.safetensors", "content");
  const FileIdentity id = file_identity(a);
  const std::string sum = file_sha256(a);
  constexpr int kProcesses = 4, kSaves = 25;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      bool ok = true;
      for (int i = 0; i < kSaves; ++i) {
        ChecksumCache cache(folder());
        FileIdentity mine = id;
        mine.mtime_ns += i;  // a change every time, so every round writes
        cache.put(fmt::format("p{}.safetensors", p), mine, sum);
        ok = ok && cache.save().empty();
      }
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::ifstream in(folder_file());
  const auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("format"), "tdiff-checksums");
  EXPECT_GE(j.at("files").size(), 1u);
  for (const auto& e : fs::directory_iterator(dir_ / "model"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "temporary left: " << e.path();
}

TEST_F(ChecksumCacheTest, FullWeightCheckHashesWholeAndFillsTheCache) {
  const std::string a = write_weights("a.safetensors", "content");
  const std::string sum = file_sha256(a);
  // A cache entry that lies: the full check must not take it.
  ChecksumCache lying(folder());
  lying.put("a.safetensors", file_identity(a), std::string(64, '0'));
  ASSERT_EQ(lying.save(), "");
  WeightCheck c = check_weight_files({a}, {{"a.safetensors", sum}}, {}, /*full=*/true);
  EXPECT_TRUE(c.changed.empty());
  EXPECT_EQ(c.hashed_files, 1u);
  EXPECT_EQ(c.cache_note, "");
  // ... and it corrected the cache.
  ChecksumReport r;
  EXPECT_EQ(weight_checksums({a}, {}, &r).at(0), sum);
  EXPECT_EQ(r.cached, 1u);
  // A full check against another record says so, from the file's own bytes.
  c = check_weight_files({a}, {{"a.safetensors", std::string(64, '1')}}, {}, /*full=*/true);
  ASSERT_EQ(c.changed.size(), 1u);
  EXPECT_NE(c.changed[0].find("its SHA-256 differs from the record"), std::string::npos) << c.changed[0];
}

TEST_F(ChecksumCacheTest, ProgressLine) {
  EXPECT_EQ(HashMeter::line(12'300'000'000, 160'000'000'000, 3, 163),
            "checksums: hashing 12.3 of 160.0 GB (3 of 163 files done)");
  ChecksumReport r;
  r.files = 3, r.hashed = 3, r.hashed_bytes = 160'200'000'000, r.seconds = 412;
  EXPECT_EQ(r.summary(), "checksums: 3 of 3 files hashed (0 from the cache; 160.2 GB in 412.0 s)");
}

}  // namespace
}  // namespace tdiff
