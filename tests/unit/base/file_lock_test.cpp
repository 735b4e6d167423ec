// FileLock across processes: one holder at a time, a waiter that proceeds when the holder lets
// go (or dies), and no lock file left behind.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"
#include "base/file_lock.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tdiff_lock_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    target_ = (dir_ / "c.h5").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string target_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A child that waits for a byte on `go`, then takes the lock, writes a line to `log` when it
// has it, and exits. Forked before the parent locks: a child forked while the parent held the
// lock would share the lock's open file and so keep it alive itself.
pid_t lock_in_child(const std::string& target, const std::string& log, int go) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    char byte = 0;
    if (::read(go, &byte, 1) != 1) std::_Exit(3);
    if (!std::freopen((log + ".err").c_str(), "w", stderr)) std::_Exit(4);  // the waiting line
    std::setvbuf(stderr, nullptr, _IONBF, 0);
    {
      FileLock lock(target, "child");
      std::ofstream(log, std::ios::app) << "child has it\n";
    }
    std::fflush(stderr);
    std::_Exit(0);
  }
  return pid;
}

TEST_F(FileLockTest, ReleaseLeavesNoLockFile) {
  {
    FileLock lock(target_, "tdiff test");
    EXPECT_TRUE(lock.held());
    EXPECT_TRUE(fs::exists(FileLock::lock_path_for(target_)));
    EXPECT_EQ(fs::path(lock.lock_path()).filename().string(), ".c.h5.tdiff.lock");
  }
  EXPECT_FALSE(fs::exists(FileLock::lock_path_for(target_)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(FileLockTest, AWaiterProceedsOnlyAfterTheHolderLetsGo) {
  const std::string log = (dir_ / "log").string();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = lock_in_child(target_, log, go[0]);
  auto holder = std::make_unique<FileLock>(target_, "holder");
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  // Until the child says it waits (it then blocks in flock), however loaded the machine.
  for (int i = 0; i < 2000 && read_all(log + ".err").find("waiting for") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(fs::exists(log)) << "the child took a lock that was held";
  std::ofstream(log, std::ios::app) << "holder lets go\n";
  holder.reset();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(log);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "holder lets go");
  EXPECT_EQ(second, "child has it");
  // It did find the lock held, and said by whom.
  std::ifstream err(log + ".err");
  std::string said;
  std::getline(err, said);
  EXPECT_NE(said.find(fmt::format("waiting for {}: pid {}: holder is updating it", target_, ::getpid())), std::string::npos)
      << said;
  EXPECT_FALSE(fs::exists(FileLock::lock_path_for(target_)));
}

TEST_F(FileLockTest, AKilledHolderDoesNotKeepTheLock) {
  int held[2];
  ASSERT_EQ(::pipe(held), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    FileLock lock(target_, "killed");
    if (::write(held[1], "x", 1) != 1) std::_Exit(3);
    ::pause();
    std::_Exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(held[0], &byte, 1), 1);  // the child holds the lock now
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  FileLock lock(target_, "after");  // the stale lock file is taken over, not waited on
  EXPECT_TRUE(lock.held());
  lock.release();
  EXPECT_FALSE(fs::exists(FileLock::lock_path_for(target_)));
}

TEST_F(FileLockTest, ManyProcessesTakeTurns) {
  // Each child appends to a counter file under the lock: a lost update would show a smaller
  // count (read, pause, write without the lock loses most of them).
  const std::string counter = (dir_ / "n").string();
  std::ofstream(counter) << 0;
  std::vector<pid_t> kids;
  for (int k = 0; k < 6; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (int i = 0; i < 5; ++i) {
        FileLock lock(target_, "counter");
        int n = 0;
        std::ifstream(counter) >> n;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::ofstream(counter) << n + 1;
      }
      std::_Exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) ::waitpid(pid, nullptr, 0);
  int n = 0;
  std::ifstream(counter) >> n;
  EXPECT_EQ(n, 30);
  EXPECT_FALSE(fs::exists(FileLock::lock_path_for(target_)));
}

TEST_F(FileLockTest, ALinkToTheCaseTakesTheSameLock) {
  std::ofstream(target_) << "case";
  fs::create_symlink(target_, dir_ / "alias.h5");
  EXPECT_EQ(FileLock::lock_path_for((dir_ / "alias.h5").string()), FileLock::lock_path_for(target_));
  EXPECT_EQ(FileLock::lock_path_for((dir_ / "." / "c.h5").string()), FileLock::lock_path_for(target_));
}

TEST_F(FileLockTest, ALinkPlantedAtTheLockFileIsNotFollowed) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, FileLock::lock_path_for(target_));
  try {
    FileLock lock(target_, "x");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a symbolic link"), std::string::npos) << e.what();
  }
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
}

TEST_F(FileLockTest, AFolderThatDoesNotExistIsAnInputError) {
  try {
    FileLock lock((dir_ / "nope" / "c.h5").string(), "x");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create a lock file in"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tdiff
