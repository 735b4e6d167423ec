// Damaged case files (issue 39 item 2): one flipped byte, in HDF5's metadata or in a tensor's
// data, is "the case file is damaged" and exit 2 for every command that reads the case, never a
// crash; a case edited on purpose is accepted once `tdiff case seal` recorded it; a case written
// before the record existed still reads.
#include <hdf5.h>

#include <filesystem>
#include <fstream>

#include "cli_support.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::CliTest;
using testing::count_lines;

class DamagedCase : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = path("m");
    case_ = path("c.h5");
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", model_)).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 5 --seed 1 -o '{}'", model_, case_)).code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", case_)).code, 0);
  }
  static void flip(const std::string& file, std::uintmax_t at) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get() ^ 0xFF);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }
  // Every command that reads the case, on `file`.
  std::vector<std::string> commands(const std::string& file) const {
    return {fmt::format("info '{}'", file), fmt::format("run '{}' --backend emu --no-reports", file),
            fmt::format("stats '{}'", file), fmt::format("golden '{}' --stages embed", file),
            fmt::format("compare '{}' '{}' --no-reports", file, file)};
  }
  std::string model_, case_;
};

// Offsets: the record's block, HDF5's superblock and root group, the middle of the file (the
// reference's data and metadata) and its end (what HDF5 writes at close).
TEST_F(DamagedCase, EveryCommandSaysDamagedExit2) {
  const auto size = fs::file_size(case_);
  for (std::uintmax_t at : {std::uintmax_t{40}, std::uintmax_t{520}, std::uintmax_t{700}, std::uintmax_t{4096},
                            size / 3, size / 2, size - 200}) {
    const std::string bad = path(fmt::format("bad-{}.h5", at));
    fs::copy_file(case_, bad, fs::copy_options::overwrite_existing);
    flip(bad, at);
    for (const auto& cmd : commands(bad)) {
      const CliResult r = run(cmd);
      SCOPED_TRACE(fmt::format("offset {}: {}", at, cmd));
      EXPECT_EQ(r.code, 2) << r.err;
      EXPECT_EQ(count_lines(r.err), 1u) << r.err;
      EXPECT_NE(r.err.find(bad + ": the case file is damaged: "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("`tdiff case seal " + bad + "`"), std::string::npos) << r.err;
    }
  }
  // --verify-case quick: a flip in the first MiB after the block is seen without the full hash.
  const std::string bad = path("bad-quick.h5");
  fs::copy_file(case_, bad);
  flip(bad, 600);
  const CliResult r = run(fmt::format("info '{}' --verify-case quick", bad));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("its first, last or sampled bytes differ from the record"), std::string::npos) << r.err;
}

// An attribute added with plain HDF5 (as h5py would): damaged until sealed, then read by every
// command, and seal rewrites nothing a reader sees.
TEST_F(DamagedCase, SealedEditIsAccepted) {
  {
    hid_t f = H5Fopen(case_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 6);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "note", t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, "edited");
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    H5Fclose(f);
  }
  CliResult r = run(fmt::format("info '{}'", case_));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the case file is damaged"), std::string::npos) << r.err;
  r = run(fmt::format("case seal '{}'", case_));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(case_ + ": sealed, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more than it was written with"), std::string::npos) << r.out;  // what the old record said
  for (const auto& cmd : commands(case_)) {
    const CliResult c = run(cmd);
    EXPECT_LE(c.code, 1) << cmd << ": " << c.err;
  }
  r = run(fmt::format("case seal '{}'", case_));
  EXPECT_NE(r.out.find("the record already matched"), std::string::npos) << r.out;
  // A file that is not a case is not sealed.
  const std::string text = path("text.h5");
  std::ofstream(text) << "not hdf5\n";
  r = run(fmt::format("case seal '{}'", text));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
}

// A case written before the record existed (the fuzz corpus keeps one) reads unchecked, and the
// first update gives it a record.
TEST_F(DamagedCase, CaseWithoutRecordStillReads) {
  const std::string legacy = path("legacy.h5");
  fs::copy_file(std::string(TDIFF_SOURCE_DIR) + "/fuzz/corpus/case_h5/legacy-reference-embed", legacy);
  CliResult r = run(fmt::format("info '{}'", legacy));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("embed"), std::string::npos) << r.out;
  std::ifstream in(legacy, std::ios::binary);
  std::string head(8, '\0');
  in.read(head.data(), 8);
  EXPECT_EQ(head, std::string("\x89HDF\r\n\x1a\n", 8));
  r = run(fmt::format("case seal '{}'", legacy));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("it had no record"), std::string::npos) << r.out;
  r = run(fmt::format("info '{}'", legacy));
  EXPECT_EQ(r.code, 0) << r.err;
}

// A crafted file that links a group into itself (twice, so a walk without memory would branch
// 2^depth times): every listing and every update visits it once, and the case still works.
TEST_F(DamagedCase, GroupsLinkedIntoThemselvesAreWalkedOnce) {
  {
    const hid_t f = H5Fopen(case_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t g = H5Gcreate2(f, "/extra", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(g, 0);
    ASSERT_GE(H5Lcreate_hard(f, "/extra", g, "a", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_hard(f, "/extra", g, "b", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Gclose(g);
    H5Fclose(f);
  }
  ASSERT_EQ(run(fmt::format("case seal '{}'", case_)).code, 0);
  for (const std::string& cmd : {fmt::format("info '{}'", case_), fmt::format("golden '{}'", case_),
                                 fmt::format("run '{}' --policy fp32 --no-reports", case_),
                                 fmt::format("compare '{}' '{}' --no-reports", case_, case_)}) {
    const CliResult r = run(cmd);
    EXPECT_LT(r.code, 2) << cmd << "\n" << r.err;
  }
}

// The quick check (a large case's default) reads samples; damage between them must not be
// sealed anew by the next command: a run only reads the case (its record goes to the run
// history), so the full check still finds the damage afterwards.
TEST_F(DamagedCase, AnUpdateNeverSealsDamageTheQuickCheckMissed) {
  const std::string big = path("big.h5");  // about 7 MB: more than the quick check's 3 MiB
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 48 --seed 1 -o '{}'", model_, big)).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}'", big)).code, 0);
  const auto size = fs::file_size(big);
  std::string bad;
  for (std::uintmax_t at = size / 2; at < size / 2 + 64 * 4096 && bad.empty(); at += 4096) {
    const std::string f = path(fmt::format("q-{}.h5", at));
    fs::copy_file(big, f, fs::copy_options::overwrite_existing);
    flip(f, at);
    if (run(fmt::format("info '{}' --verify-case quick", f)).code == 0) bad = f;
  }
  ASSERT_FALSE(bad.empty()) << "no offset between the quick check's samples";
  const auto bytes = fs::file_size(bad);
  // A run reads the case and records into the run history: the case keeps its bytes and its
  // record, so the damage is still found by the full check.
  const std::string before = testing::slurp(bad);
  const CliResult r = run(fmt::format("run '{}' --policy fp32 --no-reports --verify-case quick", bad));
  EXPECT_LE(r.code, 1) << r.out << r.err;
  EXPECT_EQ(fs::file_size(bad), bytes);
  EXPECT_TRUE(testing::slurp(bad) == before) << "the run rewrote the case";
  EXPECT_EQ(run(fmt::format("info '{}' --verify-case full", bad)).code, 2);  // still damaged, not sealed
}

}  // namespace
}  // namespace tdiff
