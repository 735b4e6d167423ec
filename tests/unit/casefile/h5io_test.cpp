// core/h5io: every dtype round trip, attributes, atomic writes and updates, one-line errors,
// and files that h5dump and h5py can read.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "base/error.h"
#include "casefile/h5io.h"

namespace fs = std::filesystem;
using namespace tdiff;

namespace {

// A fresh folder per test, removed afterwards.
class H5io : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tdiff-h5io-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // Names in the folder, to catch leftover temporary files.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fills every element from a pattern that covers awkward values of float types.
Tensor sample(DType t, Shape shape) {
  Tensor x(t, std::move(shape));
  const double specials[] = {0.0, -0.0, 1.0, -2.5, 1e-7, 65504.0, 448.0, std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(), 3.14159, -1e-3, 7.0};
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::byte* p = x.raw() + static_cast<std::size_t>(i) * dtype_size(t);
    const double v = specials[i % 12];
    switch (t) {
      case DType::f64: std::memcpy(p, &v, 8); break;
      case DType::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::f16: { auto b = f16_bits(v); std::memcpy(p, &b, 2); break; }
      case DType::bf16: { auto b = bf16_bits(v); std::memcpy(p, &b, 2); break; }
      case DType::f8_e4m3: *p = static_cast<std::byte>(f8e4m3_bits(std::isinf(v) ? 1.0 : v)); break;
      case DType::i64: { std::int64_t k = (i % 2 ? -1 : 1) * (std::int64_t{1} << (i % 62)); std::memcpy(p, &k, 8); break; }
      case DType::i32: { std::int32_t k = static_cast<std::int32_t>(i * 7919 - 100000); std::memcpy(p, &k, 4); break; }
      case DType::u8: *p = static_cast<std::byte>(i * 37 % 256); break;
      case DType::boolean: *p = static_cast<std::byte>(i % 3 == 0); break;
    }
  }
  return x;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(dtype_name(a.dtype()), dtype_name(b.dtype()));
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << "bytes differ for " << dtype_name(a.dtype());
}

const DType kAll[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3,
                      DType::i64, DType::i32, DType::u8,  DType::boolean};

std::string read_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_F(H5io, RoundTripEveryDtype) {
  const std::string f = file("all.h5");
  {
    H5Writer w(f);
    for (DType t : kAll) {
      w.write(std::string("/t/") + std::string(dtype_name(t)), sample(t, {3, 5, 2}));
      w.write(std::string("/scalar/") + std::string(dtype_name(t)), sample(t, {}));
      w.write(std::string("/empty/") + std::string(dtype_name(t)), sample(t, {0, 4}));
    }
    w.write("/rank5", sample(DType::f32, {2, 1, 3, 1, 2}));
    w.commit();
  }
  for (DType t : kAll) {
    const std::string n(dtype_name(t));
    expect_same(h5_read(f, "/t/" + n), sample(t, {3, 5, 2}));
    expect_same(h5_read(f, "/scalar/" + n), sample(t, {}));
    expect_same(h5_read(f, "/empty/" + n), sample(t, {0, 4}));
  }
  expect_same(h5_read(f, "rank5"), sample(DType::f32, {2, 1, 3, 1, 2}));
  // Only the types HDF5 lacks carry a dtype tag.
  EXPECT_EQ(h5_read_attrs(f, "/t/bf16").at("dtype"), "bf16");
  EXPECT_EQ(h5_read_attrs(f, "/t/f8_e4m3").at("dtype"), "f8_e4m3");
  EXPECT_EQ(h5_read_attrs(f, "/t/bool").at("dtype"), "bool");
  EXPECT_TRUE(h5_read_attrs(f, "/t/f16").empty());
}

// Large masks, ids and selections are chunked and compressed; float tensors are stored as
// they are (compressing a reference took most of golden's time for 14%).
TEST_F(H5io, LargeIntegerDatasetsAreCompressedFloatOnesNot) {
  const std::string f = file("big.h5");
  Tensor ids(DType::i64, {700, 300});  // 1.6 MiB, compressible
  Tensor x(DType::f64, {700, 300});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    ids.data<std::int64_t>()[i] = i % 100;
    x.data<double>()[i] = static_cast<double>(i % 100) + 0.5;
  }
  {
    H5Writer w(f);
    w.write("/ids", ids);
    w.write("/x", x);
    w.commit();
  }
  expect_same(h5_read(f, "/ids"), ids);
  expect_same(h5_read(f, "/x"), x);
  EXPECT_LT(fs::file_size(f), x.nbytes() + ids.nbytes() / 4);
  hid_t h = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (const char* name : {"/ids", "/x"}) {
    hid_t d = H5Dopen2(h, name, H5P_DEFAULT);
    hid_t p = H5Dget_create_plist(d);
    const bool integer = std::string(name) == "/ids";
    EXPECT_EQ(H5Pget_layout(p), integer ? H5D_CHUNKED : H5D_CONTIGUOUS) << name;
    EXPECT_EQ(H5Pget_nfilters(p), integer ? 2 : 0) << name;  // shuffle + deflate
    H5Pclose(p);
    H5Dclose(d);
  }
  H5Fclose(h);
}

// A dataset may declare any shape (HDF5 reads what was never written as fill values): one whose
// byte count wraps around, or exceeds the machine's memory, is refused before any allocation.
TEST_F(H5io, DeclaredShapesTooLargeAreRefusedBeforeAllocating) {
  const std::string f = file("huge.h5");
  {
    hid_t h = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    for (const auto& [name, n] : {std::pair<const char*, hsize_t>{"/wraps", hsize_t{1} << 61}, {"/terabytes", hsize_t{1} << 40}}) {
      const hsize_t dims[1] = {n}, chunk[1] = {1024};
      hid_t space = H5Screate_simple(1, dims, nullptr);
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(dcpl, 1, chunk);
      hid_t d = H5Dcreate2(h, name, H5T_STD_I64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      ASSERT_GE(d, 0) << name;
      H5Dclose(d);
      H5Pclose(dcpl);
      H5Sclose(space);
    }
    H5Fclose(h);
  }
  for (const char* name : {"/wraps", "/terabytes"}) {
    try {
      h5_read(f, name);
      ADD_FAILURE() << name << " was read";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find("declares shape"), std::string::npos) << what;
    }
  }
}

TEST_F(H5io, AttributesRoundTrip) {
  const std::string f = file("attrs.h5");
  const std::string long_text(200000, 'x');  // beyond HDF5's 64 KiB compact attribute limit
  {
    H5Writer w(f);
    w.set_attr("/", "format_version", "1");
    w.set_attr("/", "unicode", "größe ✓");
    w.set_attr("/", "long", long_text);
    w.set_attr("/", "empty", "");
    w.set_attr("/env/run-1", "backend", "refcpu");  // creates the groups
    w.write("/d", sample(DType::f32, {2}));
    w.set_attr("/d", "note", "on a dataset");
    w.set_attr("/", "format_version", "2");  // replaced
    w.commit();
  }
  const auto root = h5_read_attrs(f, "/");
  EXPECT_EQ(root.at("format_version"), "2");
  EXPECT_EQ(root.at("unicode"), "größe ✓");
  EXPECT_EQ(root.at("long"), long_text);
  EXPECT_EQ(root.at("empty"), "");
  EXPECT_EQ(h5_read_attrs(f, "/env/run-1").at("backend"), "refcpu");
  EXPECT_EQ(h5_read_attrs(f, "/d").at("note"), "on a dataset");
}

TEST_F(H5io, ListExistsReplaceRemove) {
  const std::string f = file("list.h5");
  {
    H5Writer w(f);
    w.write("/reference/L01.attn.core/o", sample(DType::f64, {2, 2}));
    w.write("/reference/L00.attn.core/o", sample(DType::f64, {2, 2}));
    w.write("/reference/L00.attn.core/lse", sample(DType::f64, {2}));
    w.write("/inputs/ids", sample(DType::i64, {1, 3}));
    w.write("/inputs/ids", sample(DType::i32, {4}));  // replaces, other dtype and shape
    w.write("/gone/x", sample(DType::u8, {1}));
    w.remove("/gone");
    w.remove("/not/there");  // no-op
    w.commit();
  }
  EXPECT_EQ(h5_list_datasets(f), (std::vector<std::string>{"/inputs/ids", "/reference/L00.attn.core/lse",
                                                            "/reference/L00.attn.core/o", "/reference/L01.attn.core/o"}));
  EXPECT_EQ(h5_list_datasets(f, "/reference/L01.attn.core"), (std::vector<std::string>{"/reference/L01.attn.core/o"}));
  EXPECT_TRUE(h5_exists(f, "/reference/L00.attn.core"));
  EXPECT_TRUE(h5_exists(f, "/"));
  EXPECT_FALSE(h5_exists(f, "/gone"));
  EXPECT_FALSE(h5_exists(f, "/reference/L02.attn.core/o"));
  expect_same(h5_read(f, "/inputs/ids"), sample(DType::i32, {4}));
}

TEST_F(H5io, AbandonedWriterLeavesNoFile) {
  const std::string f = file("new.h5");
  {
    H5Writer w(f);
    w.write("/x", sample(DType::f32, {100}));
    w.set_attr("/", "a", "b");
  }
  EXPECT_FALSE(fs::exists(f));
  EXPECT_TRUE(entries().empty()) << "left behind: " << entries().front();
}

TEST_F(H5io, AbandonedUpdateLeavesFileUntouched) {
  const std::string f = file("case.h5");
  {
    H5Writer w(f);
    w.write("/keep", sample(DType::f64, {3}));
    w.commit();
  }
  const std::string before = slurp(f);
  {
    H5Writer w(f, f);
    w.remove("/keep");
    w.write("/new", sample(DType::f32, {5}));
  }
  EXPECT_EQ(slurp(f), before);
  EXPECT_EQ(entries(), std::vector<std::string>{"case.h5"});
  // A writer that fails half way (bad path) leaves nothing either.
  EXPECT_THROW(H5Writer(file("no-such-folder/x.h5")), InputError);
  EXPECT_EQ(entries(), std::vector<std::string>{"case.h5"});
}

// A full disk: HDF5 1.10 crashes inside H5Ocopy when a copy meets ENOSPC, so the writer
// checks the free space before each copy and each new dataset and fails with one line,
// leaving the file as it was and no temporary file. Needs a small filesystem: a 40 MiB tmpfs
// (skipped where mounting is not allowed).
TEST_F(H5io, FullDiskFailsCleanlyAndLeavesTheFileAlone) {
  const fs::path mnt = dir_ / "small";
  fs::create_directories(mnt);
  if (run("mount -t tmpfs -o size=40M tmpfs " + mnt.string() + " 2>/dev/null") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  struct Unmount {
    fs::path p;
    ~Unmount() { run("umount " + p.string()); }
  } unmount{mnt};
  // 12 MiB that deflate cannot shrink.
  Tensor big(DType::f64, {1572864});
  std::uint64_t h = 88172645463325252ull;
  for (std::int64_t i = 0; i < big.numel(); ++i) {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    const double v = static_cast<double>(h) / 1e19 - 0.9;
    std::memcpy(big.raw() + i * 8, &v, 8);
  }
  const std::string f = (mnt / "case.h5").string();
  {
    H5Writer w(f);
    w.write("/reference/x", big);
    w.commit();
  }
  // What `tdiff run` does: new data first, the 12 MiB /reference copied at commit. With 28
  // MiB free it fits.
  auto record_run = [&](const std::string& id) {
    H5Writer w(f, f);
    w.write("/runs/" + id + "/y", sample(DType::f32, {16}));
    w.set_attr("/env/" + id, "backend", "emu");
    w.commit();
  };
  record_run("r1");
  EXPECT_TRUE(h5_exists(f, "/runs/r1/y"));
  // 17 MiB of something else: about 11 MiB left, less than the copy needs.
  std::ofstream((mnt / "filler").string(), std::ios::binary) << std::string(17u << 20, 'x');
  const std::string before = slurp(f);
  const std::string e = read_error([&] { record_run("r2"); });
  EXPECT_NE(e.find(f), std::string::npos) << e;
  EXPECT_NE(e.find("not enough free disk space to rewrite the case file"), std::string::npos) << e;
  EXPECT_EQ(slurp(f), before);
  // So does a new tensor that does not fit.
  const std::string e2 = read_error([&] {
    H5Writer w((mnt / "other.h5").string());
    w.write("/a", big);
    w.commit();
  });
  EXPECT_NE(e2.find("not enough free disk space to write the new data"), std::string::npos) << e2;
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(mnt)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"case.h5", "filler"}));
}

TEST_F(H5io, UpdateKeepsWhatItDoesNotTouch) {
  const std::string f = file("case.h5");
  {
    H5Writer w(f);
    w.set_attr("/", "format_version", "1");
    w.set_attr("/inputs", "pad_side", "left");
    w.write("/inputs/ids", sample(DType::i64, {2, 3}));
    w.write("/inputs/mask", sample(DType::boolean, {2, 3}));
    w.write("/reference/embed/e", sample(DType::f64, {2, 3, 4}));
    w.write("/reference/lm_head/logits", sample(DType::f64, {2, 3, 8}));
    w.write("/runs/r1/x", sample(DType::bf16, {7}));
    w.commit();
  }
  for (int round = 0; round < 3; ++round) {
    H5Writer w(f, f);
    w.remove("/reference");
    w.write("/reference/embed/e", sample(DType::f64, {2, 3, 4}));
    w.remove("/runs/r1/x");
    w.write("/runs/r2/y", sample(DType::f16, {4}));
    w.set_attr("/env/r2", "backend", "emu");
    w.commit();
  }
  EXPECT_EQ(h5_read_attrs(f, "/").at("format_version"), "1");
  EXPECT_EQ(h5_read_attrs(f, "/inputs").at("pad_side"), "left");
  expect_same(h5_read(f, "/inputs/mask"), sample(DType::boolean, {2, 3}));
  expect_same(h5_read(f, "/reference/embed/e"), sample(DType::f64, {2, 3, 4}));
  EXPECT_FALSE(h5_exists(f, "/reference/lm_head"));
  EXPECT_FALSE(h5_exists(f, "/runs/r1/x"));
  expect_same(h5_read(f, "/runs/r2/y"), sample(DType::f16, {4}));
  EXPECT_EQ(h5_read_attrs(f, "/env/r2").at("backend"), "emu");
  EXPECT_EQ(entries(), std::vector<std::string>{"case.h5"});
}

TEST_F(H5io, ErrorsNameFileAndDataset) {
  const std::string good = file("good.h5");
  {
    H5Writer w(good);
    w.write("/inputs/ids", sample(DType::i64, {64, 64}));
    w.commit();
  }
  EXPECT_EQ(read_error([&] { h5_read(good, "/x"); }), good + ": dataset '/x' is missing");
  EXPECT_EQ(read_error([&] { h5_read(good, "/inputs/ids/deeper"); }), good + ": dataset '/inputs/ids/deeper' is missing");
  EXPECT_NE(read_error([&] { h5_read(good, "/inputs"); }).find("'/inputs' is a group"), std::string::npos);
  EXPECT_EQ(read_error([&] { h5_list_datasets(good, "/runs"); }), good + ": group '/runs' is missing");

  const std::string missing = file("missing.h5");
  EXPECT_EQ(read_error([&] { h5_read(missing, "/x"); }), missing + ": no such file");

  const std::string text = file("text.h5");
  std::ofstream(text) << "not hdf5 at all\n";
  EXPECT_EQ(read_error([&] { h5_list_datasets(text); }), text + ": not an HDF5 file");

  const std::string cut = file("cut.h5");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) / 2);
  const std::string msg = read_error([&] { h5_read(cut, "/inputs/ids"); });
  EXPECT_EQ(msg.rfind(cut + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(H5io, ReadsH5pyStyleBoolEnumAndPlainIntegers) {
  // h5py writes numpy bool as an int8 enum {FALSE, TRUE}; int16 reads as i64.
  const std::string f = file("h5py.h5");
  hid_t h = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t e = H5Tenum_create(H5T_NATIVE_INT8);
  std::int8_t v0 = 0, v1 = 1;
  H5Tenum_insert(e, "FALSE", &v0);
  H5Tenum_insert(e, "TRUE", &v1);
  hsize_t n = 4;
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(h, "mask", e, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::int8_t bits[4] = {1, 0, 1, 1};
  H5Dwrite(d, e, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits);
  H5Dclose(d);
  hid_t d2 = H5Dcreate2(h, "i16", H5T_STD_I16BE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::int16_t vals[4] = {-3, 0, 300, 7};
  H5Dwrite(d2, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals);
  H5Dclose(d2);
  H5Sclose(s);
  H5Tclose(e);
  H5Fclose(h);

  Tensor m = h5_read(f, "/mask");
  ASSERT_EQ(m.dtype(), DType::boolean);
  EXPECT_EQ(std::vector<std::uint8_t>(m.span<const std::uint8_t>().begin(), m.span<const std::uint8_t>().end()),
            (std::vector<std::uint8_t>{1, 0, 1, 1}));
  Tensor i = h5_read(f, "/i16");
  ASSERT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.data<std::int64_t>()[0], -3);
  EXPECT_EQ(i.data<std::int64_t>()[2], 300);
}

TEST_F(H5io, ReadableByH5dump) {
  if (run("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed (apt: hdf5-tools)";
  const std::string f = file("dump.h5");
  {
    H5Writer w(f);
    for (DType t : kAll) w.write(std::string("/t/") + std::string(dtype_name(t)), sample(t, {2, 3}));
    w.write("/big", Tensor(DType::f32, {600, 600}));
    w.set_attr("/", "model_config", "{\"model_type\": \"deepseek_v4\"}");
    w.commit();
  }
  const std::string out = file("dump.txt");
  ASSERT_EQ(run("h5dump -H '" + f + "' > '" + out + "' 2>&1"), 0) << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("DATASET \"f16\""), std::string::npos);
  EXPECT_NE(text.find("H5T_IEEE_F64LE"), std::string::npos);
  EXPECT_NE(text.find("H5T_STD_I64LE"), std::string::npos);
  ASSERT_EQ(run("h5dump -d /t/f64 '" + f + "' > '" + out + "' 2>&1"), 0) << slurp(out);
  EXPECT_NE(slurp(out).find("-2.5"), std::string::npos);
}

TEST_F(H5io, ReadableByH5py) {
  std::string py;
  for (const char* cand : {"python3", "/usr/bin/python3"})
    if (run(std::string(cand) + " -c 'import h5py, numpy' >/dev/null 2>&1") == 0) { py = cand; break; }
  if (py.empty()) GTEST_SKIP() << "python3 with h5py not available";
  const std::string f = file("py.h5");
  {
    H5Writer w(f);
    Tensor h(DType::f16, {3});
    h.data<std::uint16_t>()[0] = f16_bits(1.5);
    h.data<std::uint16_t>()[1] = f16_bits(-65504.0);
    h.data<std::uint16_t>()[2] = f16_bits(6e-8);
    w.write("/h", h);
    w.write("/b", sample(DType::bf16, {4}));
    w.set_attr("/", "prompts", "1 2 3\n4 5");
    w.commit();
  }
  const std::string script = file("check.py");
  std::ofstream(script) << "import sys, h5py, numpy as np\n"
                           "f = h5py.File(sys.argv[1], 'r')\n"
                           "h = f['h'][()]\n"
                           "assert h.dtype == np.float16, h.dtype\n"
                           "assert h[0] == 1.5 and h[1] == -65504 and h[2] > 0, h\n"
                           // String attributes are fixed-length UTF-8: h5py returns bytes.
                           "assert f['b'].dtype == np.uint16 and f['b'].attrs['dtype'].decode() == 'bf16'\n"
                           "assert f.attrs['prompts'].decode() == '1 2 3\\n4 5'\n";
  EXPECT_EQ(run(py + " '" + script + "' '" + f + "'"), 0);
}
