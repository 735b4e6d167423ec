// The integrity record in the user block of every file H5Writer writes (base/file_seal.h): its
// text, what each kind of damage is reported as, the checks open_read makes before HDF5 parses
// the file, and files without a record (older cases, other tools' files) read as before.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "base/error.h"
#include "base/file_seal.h"
#include "casefile/h5_common.h"
#include "casefile/h5io.h"

namespace fs = std::filesystem;
using namespace tdiff;

namespace {

class CaseSeal : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tdiff-seal-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    h5::forget_checked_files();
  }
  void TearDown() override {
    h5::set_case_check(h5::CaseCheck::automatic);
    fs::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // A small file written by H5Writer: two datasets, one attribute.
  std::string written(const std::string& name) const {
    const std::string f = file(name);
    H5Writer w(f);
    Tensor t(DType::f64, {64});
    for (std::int64_t i = 0; i < 64; ++i) t.data<double>()[i] = 0.5 * static_cast<double>(i);
    w.write("/reference/a/x", t);
    w.write("/reference/b/y", t);
    w.set_attr("/", "format_version", "1");
    w.commit();
    return f;
  }
  static std::string bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void flip(const std::string& path, std::uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get() ^ 0xFF);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }
  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(CaseSeal, RecordIsTextInTheUserBlockAndMatches) {
  const std::string f = written("a.h5");
  const std::string head = bytes(f).substr(0, kSealBlock);
  EXPECT_EQ(head.rfind("tdiff-seal 1\nblock=512\nsize=", 0), 0u) << head;
  EXPECT_EQ(bytes(f).substr(kSealBlock, 8), std::string("\x89HDF\r\n\x1a\n", 8));  // HDF5 right after it
  const SealRead r = read_seal(f);
  ASSERT_TRUE(r.sealed);
  EXPECT_EQ(r.damage, "");
  EXPECT_EQ(r.record.size, fs::file_size(f));
  EXPECT_EQ(format_seal(r.record), head);
  for (bool full : {false, true}) {
    const auto c = check_seal(f, full);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->damage, "");
    EXPECT_EQ(c->hashed, full);
  }
  EXPECT_EQ(h5_read(f, "/reference/b/y").numel(), 64);
}

TEST_F(CaseSeal, EveryKindOfDamageIsNamed) {
  const std::string good = written("good.h5");
  auto damaged = [&](const std::string& name, const std::function<void(const std::string&)>& edit) {
    const std::string f = file(name);
    fs::copy_file(good, f);
    edit(f);
    return error_of([&] { h5_list_datasets(f); });
  };
  const std::string tail = "; if it was edited on purpose, `tdiff case seal ";
  std::string e = damaged("meta.h5", [](const std::string& f) { flip(f, kSealBlock + 100); });
  EXPECT_NE(e.find("meta.h5: the case file is damaged: its first, last or sampled bytes differ from the record" + tail),
            std::string::npos)
      << e;
  e = damaged("cut.h5", [&](const std::string& f) { fs::resize_file(f, fs::file_size(good) - 10); });
  EXPECT_NE(e.find("the case file is damaged: it is truncated ("), std::string::npos) << e;
  e = damaged("long.h5", [&](const std::string& f) { std::ofstream(f, std::ios::app) << "x"; });
  EXPECT_NE(e.find("1 more than it was written with"), std::string::npos) << e;
  e = damaged("magic.h5", [](const std::string& f) { flip(f, 2); });
  EXPECT_NE(e.find("its integrity record is damaged (the first line is not 'tdiff-seal 1')"), std::string::npos) << e;
  e = damaged("digit.h5", [](const std::string& f) { flip(f, 20); });
  EXPECT_NE(e.find("its integrity record is damaged ("), std::string::npos) << e;
  e = damaged("pad.h5", [](const std::string& f) { flip(f, kSealBlock - 1); });
  EXPECT_NE(e.find("(bytes after the record)"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// A flip the quick fingerprint does not read (a 4 MiB file: between two samples, past the
// first MiB) is found by the full check alone.
TEST_F(CaseSeal, FullCheckFindsWhatQuickMisses) {
  const std::string f = file("big.h5");
  {
    H5Writer w(f);
    w.write("/x", Tensor(DType::f64, {512 * 1024}));
    w.commit();
  }
  const std::uint64_t size = fs::file_size(f), data = size - kSealBlock, step = (data - (64 << 10)) / 15;
  std::uint64_t at = 0;
  for (std::uint64_t i = 4; i < 14 && !at; ++i) {
    const std::uint64_t gap = i * step + (64 << 10) + 16;  // just past sample i
    if (gap + 16 < (i + 1) * step && gap > (1u << 20) && gap + (1u << 20) < data) at = kSealBlock + gap;
  }
  ASSERT_NE(at, 0u);
  flip(f, at);
  EXPECT_EQ(check_seal(f, false)->damage, "");
  EXPECT_EQ(check_seal(f, true)->damage, "its SHA-256 differs from the record");
  h5::set_case_check(h5::CaseCheck::quick);
  EXPECT_EQ(h5_dataset_info(f, "/x").shape, Shape{512 * 1024});
  h5::set_case_check(h5::CaseCheck::automatic);  // 4 MiB: hashed whole
  EXPECT_NE(error_of([&] { h5_read(f, "/x"); }).find("its SHA-256 differs from the record"), std::string::npos);
}

// Quick mode reads the ends and 16 samples: a flip in the first MiB after the block is seen
// without hashing the file; the full check sees any flip.
TEST_F(CaseSeal, QuickAndFullModes) {
  const std::string f = written("q.h5");
  flip(f, kSealBlock + 300);
  h5::set_case_check(h5::CaseCheck::quick);
  EXPECT_NE(error_of([&] { h5_exists(f, "/reference"); }).find("first, last or sampled bytes differ"),
            std::string::npos);
  h5::set_case_check(h5::CaseCheck::full);
  EXPECT_NE(error_of([&] { h5_exists(f, "/reference"); }).find("first, last or sampled bytes differ"),
            std::string::npos);
  h5::set_case_check(h5::CaseCheck::off);
  EXPECT_EQ(error_of([&] { h5_exists(f, "/reference"); }).find("damaged: "), std::string::npos);
}

// Each file is checked once per process: a changed file (new size, time or inode) again.
TEST_F(CaseSeal, CheckedOncePerFileVersion) {
  const std::string f = written("once.h5");
  EXPECT_TRUE(h5_exists(f, "/reference/a/x"));
  written("other.h5");
  fs::rename(file("other.h5"), file("once.h5"));
  EXPECT_TRUE(h5_exists(f, "/reference/a/x"));
  fs::resize_file(f, fs::file_size(f) + 1);
  EXPECT_NE(error_of([&] { h5_exists(f, "/reference"); }).find("more than it was written with"), std::string::npos);
}

// Updates keep the block and seal the result, by object copy and by byte copy; a file without
// a block (an older case, h5py's) reads unchecked and gains one when tdiff updates it.
TEST_F(CaseSeal, UpdatesAndFilesWithoutRecord) {
  const std::string f = written("u.h5");
  for (auto copy : {H5Writer::Copy::objects, H5Writer::Copy::bytes}) {
    H5Writer w(f, f, copy);
    w.set_attr("/", "note", copy == H5Writer::Copy::bytes ? "bytes" : "objects");
    w.commit();
    const auto c = check_seal(f, true);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->damage, "");
    EXPECT_EQ(h5_read_attrs(f, "/").at("note"), copy == H5Writer::Copy::bytes ? "bytes" : "objects");
  }
  const std::string plain = file("plain.h5");
  hid_t h = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t n = 3;
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(h, "x", H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const double v[3] = {1, 2, 3};
  H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(d);
  H5Sclose(s);
  H5Fclose(h);
  EXPECT_FALSE(check_seal(plain, true).has_value());
  EXPECT_FALSE(read_seal(plain).sealed);
  EXPECT_EQ(h5_read(plain, "/x").numel(), 3);
  {
    H5Writer w(plain, plain, H5Writer::Copy::bytes);
    w.set_attr("/", "note", "sealed now");
    w.commit();
  }
  const auto c = check_seal(plain, true);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->damage, "");
  EXPECT_EQ(h5_read(plain, "/x").numel(), 3);
}

}  // namespace
