// The folders ci makes for its reports and its cache (app/ci_suite.h): make_folders names only
// the folders its own mkdir made, and remove_empty_folders takes back only those still empty,
// so a run that fails removes nothing another run put beside it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "app/ci_suite.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class CiFolders : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tdiff_ci_folders_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "there");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CiFolders, NamesOnlyTheFoldersItMade) {
  std::error_code ec;
  const auto made = make_folders(dir_ / "there/a/b/", ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(made, (std::vector<fs::path>{dir_ / "there/a", dir_ / "there/a/b"}));
  EXPECT_TRUE(fs::is_directory(dir_ / "there/a/b"));
  EXPECT_TRUE(make_folders(dir_ / "there/a/b", ec).empty()) << "all there: none made";
  EXPECT_FALSE(ec);
}

TEST_F(CiFolders, AFileInTheWayIsNotAFolder) {
  std::ofstream(dir_ / "there/file") << "x";
  std::error_code ec;
  EXPECT_TRUE(make_folders(dir_ / "there/file/x", ec).empty());
  EXPECT_EQ(ec, std::errc::not_a_directory) << ec.message();
  EXPECT_TRUE(make_folders(dir_ / "there/file", ec).empty());
  EXPECT_EQ(ec, std::errc::not_a_directory) << ec.message();
}

TEST_F(CiFolders, AFailureRemovesWhatItMadeOnTheWay) {
  std::error_code ec;
  EXPECT_TRUE(make_folders(dir_ / "there/new" / std::string(300, 'a'), ec).empty());
  EXPECT_EQ(ec, std::errc::filename_too_long) << ec.message();
  EXPECT_FALSE(fs::exists(dir_ / "there/new"));
}

TEST_F(CiFolders, RemovesOnlyFoldersStillEmpty) {
  std::error_code ec;
  const auto made = make_folders(dir_ / "there/a/b", ec);
  ASSERT_EQ(made.size(), 2u);
  fs::create_directories(dir_ / "there/a/other");  // another run's, made since
  remove_empty_folders(made);
  EXPECT_FALSE(fs::exists(dir_ / "there/a/b"));
  EXPECT_TRUE(fs::exists(dir_ / "there/a/other"));
  fs::remove(dir_ / "there/a/other");
  remove_empty_folders(made);
  EXPECT_FALSE(fs::exists(dir_ / "there/a"));
  EXPECT_TRUE(fs::exists(dir_ / "there")) << "not made by it";
}

}  // namespace
}  // namespace tdiff
