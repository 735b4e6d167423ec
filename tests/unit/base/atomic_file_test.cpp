// base/atomic_file.h and base/temp_files.h: files and folders replaced whole or not at all,
// their modes, stale temporaries, and the signal handler that removes live ones.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/temp_files.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("tdiff_atomic_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  // Every name under the folder, recursively, sorted: temporaries are hidden, not skipped.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) names.push_back(fs::relative(e.path(), dir_).string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

std::string bytes_of(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

unsigned mode_of(const std::string& f) {
  struct stat st {};
  return ::stat(f.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

void write_whole(const std::string& target, const std::string& content) {
  AtomicFile f(target);
  f.write(content);
  f.commit();
}

TEST_F(AtomicFileTest, NewFileGetsTheUmaskModeAndAReplacedFileKeepsItsMode) {
  const mode_t old_mask = ::umask(027);
  write_whole(path("new"), "one");
  ::umask(old_mask);
  EXPECT_EQ(bytes_of(path("new")), "one");
  EXPECT_EQ(mode_of(path("new")), 0640u);

  fs::permissions(path("new"), fs::perms(0604));
  write_whole(path("new"), "two");
  EXPECT_EQ(bytes_of(path("new")), "two");
  EXPECT_EQ(mode_of(path("new")), 0604u);
  EXPECT_EQ(listing(), std::vector<std::string>{"new"});
}

TEST_F(AtomicFileTest, ExceptionMidWriteLeavesTheOldFile) {
  write_whole(path("f"), "old content");
  try {
    AtomicFile f(path("f"));
    f.write("half of the new");
    EXPECT_NE(listing(), std::vector<std::string>{"f"});  // the temporary exists meanwhile
    throw std::runtime_error("disk on fire");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(bytes_of(path("f")), "old content");
  EXPECT_EQ(listing(), std::vector<std::string>{"f"});
}

TEST_F(AtomicFileTest, TheTemporaryIsHiddenBesideTheTargetAndHDF5CanOpenItByName) {
  AtomicFile f(path("case.h5"));
  const std::string name = fs::path(f.temp_path()).filename().string();
  EXPECT_EQ(fs::path(f.temp_path()).parent_path(), dir_);
  EXPECT_EQ(name.rfind(fmt::format(".case.h5.tdiff.tmp-{}-", ::getpid()), 0), 0u) << name;
  std::ofstream(f.temp_path(), std::ios::binary | std::ios::trunc) << "written by name";
  f.commit();
  EXPECT_EQ(bytes_of(path("case.h5")), "written by name");
  EXPECT_EQ(listing(), std::vector<std::string>{"case.h5"});
}

TEST_F(AtomicFileTest, AFolderThatMayNotBeWrittenIsAnInputErrorNamingTheTarget) {
  try {
    AtomicFile f(path("missing/f"));
    FAIL() << "created a temporary in a missing folder";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path("missing/f")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFileTest, StaleTemporariesAreRecognisedAndRemovedByTheNextWriter) {
  const pid_t dead = dead_pid();
  const std::string stale_file = fmt::format(".c.h5.tdiff.tmp-{}-0badc0de", dead);
  const std::string stale_folder = fmt::format(".model.tdiff.tmp-{}-12345678", dead);
  const std::string mine = fmt::format(".c.h5.tdiff.tmp-{}-0badc0de", ::getpid());
  const std::string live = fmt::format(".c.h5.tdiff.tmp-{}-0badc0de", ::getppid());
  EXPECT_TRUE(is_stale_temporary(stale_file));
  EXPECT_TRUE(is_stale_temporary(stale_folder));
  EXPECT_FALSE(is_stale_temporary(mine));
  EXPECT_FALSE(is_stale_temporary(live));
  // Names outside the scheme, even with a dead pid: not hidden, no marker, a short random
  // part, too many digits for a pid, the scheme before this one.
  for (const std::string& other :
       {std::string("c.h5"), std::string(".c.h5.tdiff.tmp-notours"), fmt::format("c.h5.tdiff.tmp-{}-0badc0de", dead),
        fmt::format(".c.h5.tdiff.tmp-{}-0badc0d", dead), fmt::format(".c.h5.tmp-{}-0badc0de", dead),
        std::string(".c.h5.tdiff.tmp-1234567890-0badc0de")})
    EXPECT_FALSE(is_stale_temporary(other)) << other;

  for (const auto& f : {stale_file, mine, live}) std::ofstream(path(f)) << "x";
  fs::create_directories(path(stale_folder + "/sub"));
  std::ofstream(path(stale_folder + "/sub/model.safetensors")) << "x";
  write_whole(path("report.csv"), "a,b\n");  // any target in the folder
  std::vector<std::string> kept{mine, live, "report.csv"};
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(listing(), kept);
  EXPECT_EQ(remove_stale_temporaries(dir_.string()), 0u);
}

TEST_F(AtomicFileTest, FolderIsSwappedInWholeAndTheOldOneRemoved) {
  fs::create_directories(path("model"));
  std::ofstream(path("model/old.safetensors")) << "old";
  fs::permissions(path("model"), fs::perms(0750));
  {
    AtomicFolder folder(path("model/"));  // a trailing slash names the same folder
    EXPECT_EQ(folder.target(), path("model"));
    write_new_file(folder.temp_path() + "/config.json", "{}", path("model/config.json"));
    folder.commit();
  }
  EXPECT_EQ(listing(), (std::vector<std::string>{"model", "model/config.json"}));
  EXPECT_EQ(mode_of(path("model")), 0750u);

  {
    AtomicFolder folder(path("fresh"));
    write_new_file(folder.temp_path() + "/a", "a", path("fresh/a"));
    folder.commit();
  }
  EXPECT_EQ(bytes_of(path("fresh/a")), "a");
}

TEST_F(AtomicFileTest, FolderNotCommittedLeavesTheOldOne) {
  fs::create_directories(path("model"));
  std::ofstream(path("model/config.json")) << "old";
  {
    AtomicFolder folder(path("model"));
    write_new_file(folder.temp_path() + "/config.json", "new", path("model/config.json"));
  }
  EXPECT_EQ(listing(), (std::vector<std::string>{"model", "model/config.json"}));
  EXPECT_EQ(bytes_of(path("model/config.json")), "old");
}

// In a child: the handler removes every registered file and folder (with what it holds) and
// the child dies of the signal; a deferred signal waits for the end of the deferral.
TEST_F(AtomicFileTest, SignalRemovesRegisteredTemporariesAndKillsWithTheSignal) {
  for (int sig : {SIGINT, SIGTERM}) {
    const pid_t child = ::fork();
    if (child == 0) {
      install_temp_cleanup();
      AtomicFile file(path("f"));
      file.write("partial");
      AtomicFolder folder(path("m"));
      fs::create_directories(folder.temp_path() + "/deep/deeper");
      std::ofstream(folder.temp_path() + "/deep/deeper/model.safetensors") << "x";
      std::ofstream(folder.temp_path() + "/config.json") << "x";
      {
        SignalDeferral not_now;
        ::raise(sig);
        std::ofstream(path("survived-the-deferral")) << "x";
      }
      ::_exit(0);  // not reached: the deferred signal ends the process
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exited with " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(listing(), std::vector<std::string>{"survived-the-deferral"});
    fs::remove(path("survived-the-deferral"));
  }
}

}  // namespace
}  // namespace tdiff
