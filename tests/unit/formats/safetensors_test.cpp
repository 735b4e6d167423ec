// safetensors reader/writer (formats/safetensors.h): round trips of every dtype, sharded model
// folders, and corrupted files, each of which must be rejected with a one-line InputError
// that names the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/safetensors.h"
#include "base/sha256.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("tdiff_st_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  fs::path dir_;
};

Tensor filled(DType t, Shape shape) {
  Tensor x(t, std::move(shape));
  for (std::size_t i = 0; i < x.nbytes(); ++i) x.raw()[i] = static_cast<std::byte>((i * 37 + 11) & 0xFF);
  if (t == DType::boolean)
    for (std::size_t i = 0; i < x.nbytes(); ++i) x.raw()[i] = static_cast<std::byte>(i % 3 == 0);
  return x;
}

// Writes an arbitrary (possibly broken) file: 8-byte length, header text, data bytes.
void write_raw(const std::string& p, const std::string& header, std::size_t data_bytes,
               std::optional<std::uint64_t> length = std::nullopt) {
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t n = length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i) & 0xFF));
  out << header;
  for (std::size_t i = 0; i < data_bytes; ++i) out.put(static_cast<char>(i));
}

// Expects opening `p` to throw an InputError whose one-line message holds every `parts`.
void expect_rejected(const std::string& p, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile f(p);
    FAIL() << p << " was accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

TEST_F(SafetensorsTest, RoundTripEveryDType) {
  std::vector<std::pair<std::string, Tensor>> ts = {
      {"f64", filled(DType::f64, {3, 5})},        {"f32", filled(DType::f32, {7})},
      {"f16", filled(DType::f16, {2, 3, 4})},     {"bf16", filled(DType::bf16, {5, 1})},
      {"f8", filled(DType::f8_e4m3, {9})},        {"i64", filled(DType::i64, {4, 2})},
      {"i32", filled(DType::i32, {3})},           {"u8", filled(DType::u8, {1, 1, 1, 1, 13})},
      {"bool", filled(DType::boolean, {6})},      {"empty", filled(DType::f32, {0, 4})},
      {"scalar", filled(DType::f64, {})},
  };
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "x y"}};
  write_safetensors(path("a.safetensors"), ts, meta);
  SafetensorsFile f(path("a.safetensors"));
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> names;
  for (const auto& [n, t] : ts) names.push_back(n);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(f.names(), names);
  for (const auto& [n, t] : ts) {
    ASSERT_TRUE(f.has(n));
    const Tensor r = f.tensor(n);
    EXPECT_EQ(r.dtype(), t.dtype()) << n;
    EXPECT_EQ(r.shape(), t.shape()) << n;
    ASSERT_EQ(r.nbytes(), t.nbytes()) << n;
    EXPECT_EQ(std::memcmp(r.raw(), t.raw(), t.nbytes()), 0) << n;
    // Tensors are packed (the format allows no gaps), so the reader copies misaligned ones.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.raw()) % dtype_size(r.dtype()), 0u) << n << " is misaligned";
  }
  // Data laid out in name order, header padded to a multiple of 8.
  std::size_t prev_end = 0;
  for (const auto& n : names) {
    EXPECT_EQ(f.info(n).begin, prev_end) << n;
    prev_end = f.info(n).end;
  }
  std::ifstream in(path("a.safetensors"), std::ios::binary);
  std::uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
  EXPECT_FALSE(f.has("nope"));
  EXPECT_THROW(f.tensor("nope"), InputError);
}

TEST_F(SafetensorsTest, ViewsOutliveTheFileObject) {
  write_safetensors(path("a.safetensors"), {{"x", filled(DType::f32, {4})}});
  Tensor view;
  {
    SafetensorsFile f(path("a.safetensors"));
    view = f.tensor("x");
  }
  EXPECT_EQ(std::memcmp(view.raw(), filled(DType::f32, {4}).raw(), 16), 0);
}

TEST_F(SafetensorsTest, WriterIsDeterministicAndAtomic) {
  auto a = filled(DType::f32, {3}), b = filled(DType::i64, {2});
  write_safetensors(path("1.safetensors"), {{"a", a}, {"b", b}});
  write_safetensors(path("2.safetensors"), {{"b", b}, {"a", a}});
  EXPECT_EQ(file_sha256(path("1.safetensors")), file_sha256(path("2.safetensors")));
  // Overwriting replaces the file; no temporary is left behind.
  write_safetensors(path("1.safetensors"), {{"c", a}});
  EXPECT_EQ(SafetensorsFile(path("1.safetensors")).names(), std::vector<std::string>{"c"});
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 2u);
  EXPECT_THROW(write_safetensors(path("3.safetensors"), {{"a", a}, {"a", b}}), InputError);
  EXPECT_THROW(write_safetensors(path("no/such/dir/x.safetensors"), {{"a", a}}), InputError);
}

TEST_F(SafetensorsTest, Sha256) {
  std::ofstream(path("abc")) << "abc";
  std::ofstream(path("empty")).flush();
  EXPECT_EQ(file_sha256(path("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(file_sha256(path("empty")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THROW(file_sha256(path("missing")), InputError);
}

TEST_F(SafetensorsTest, SingleFileFolder) {
  write_safetensors(path("model.safetensors"), {{"w", filled(DType::f32, {2, 2})}});
  ModelWeights m(dir_.string());
  EXPECT_EQ(m.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(m.files(), std::vector<std::string>{path("model.safetensors")});
  EXPECT_EQ(m.info("w").shape, (Shape{2, 2}));
  EXPECT_THROW(m.tensor("v"), InputError);
  // As in transformers, model.safetensors wins over an index beside it.
  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"w": "gone.safetensors"}})";
  EXPECT_EQ(ModelWeights(dir_.string()).names(), std::vector<std::string>{"w"});
}

TEST_F(SafetensorsTest, ShardedFolder) {
  write_safetensors(path("model-00002-of-00002.safetensors"), {{"b", filled(DType::bf16, {3})}, {"c", filled(DType::i64, {1})}});
  write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", filled(DType::f32, {2})}});
  json idx = {{"metadata", {{"total_size", 22}}},
              {"weight_map", {{"a", "model-00001-of-00002.safetensors"},
                              {"b", "model-00002-of-00002.safetensors"},
                              {"c", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(path("model.safetensors.index.json")) << idx.dump();
  ModelWeights m(dir_.string());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(m.files(), (std::vector<std::string>{path("model-00001-of-00002.safetensors"),
                                                 path("model-00002-of-00002.safetensors")}));
  EXPECT_EQ(m.tensor("b").dtype(), DType::bf16);
  EXPECT_EQ(std::memcmp(m.tensor("c").raw(), filled(DType::i64, {1}).raw(), 8), 0);
  EXPECT_TRUE(m.has("a"));
  EXPECT_FALSE(m.has("z"));
}

// locate() finds a view's bytes in its shard, and pread of fd() at that offset gives the same
// bytes, even after another file was renamed over the path (the hip backend uploads so).
TEST_F(SafetensorsTest, LocateGivesTheFileBytesOfAView) {
  write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", filled(DType::f32, {5})}});
  write_safetensors(path("model-00002-of-00002.safetensors"), {{"b", filled(DType::bf16, {7})}});
  json idx = {{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(path("model.safetensors.index.json")) << idx.dump();
  ModelWeights m(dir_.string());
  write_safetensors(path("model-00002-of-00002.safetensors"), {{"b", filled(DType::f32, {9})}});
  for (const std::string name : {"a", "b"}) {
    const Tensor t = m.tensor(name);
    const auto span = m.locate(static_cast<const std::byte*>(t.raw()) + 2, t.nbytes() - 2);
    ASSERT_TRUE(span.has_value()) << name;
    EXPECT_EQ(span->path, path(name == "a" ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors"));
    std::vector<std::byte> read(t.nbytes() - 2);
    ASSERT_EQ(::pread(span->fd, read.data(), read.size(), static_cast<off_t>(span->offset)),
              static_cast<ssize_t>(read.size()));
    EXPECT_EQ(std::memcmp(read.data(), static_cast<const std::byte*>(t.raw()) + 2, read.size()), 0) << name;
    EXPECT_FALSE(m.locate(t.raw(), t.nbytes() + (std::size_t{1} << 30)).has_value()) << "past the mapping's end";
  }
  const std::vector<float> host(4);
  EXPECT_FALSE(m.locate(host.data(), 16).has_value());
}

void expect_folder_rejected(const std::string& dir, std::initializer_list<std::string> parts) {
  try {
    ModelWeights m(dir);
    FAIL() << dir << " was accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

TEST_F(SafetensorsTest, ShardedFolderErrors) {
  write_safetensors(path("s1.safetensors"), {{"a", filled(DType::f32, {2})}});
  std::ofstream(path("model.safetensors.index.json")) << json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}}.dump();
  expect_folder_rejected(dir_.string(), {"s2.safetensors", "missing"});
  std::ofstream(path("model.safetensors.index.json")) << json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}}}.dump();
  expect_folder_rejected(dir_.string(), {"'b'", "s1.safetensors"});
  std::ofstream(path("model.safetensors.index.json")) << "{\"weight_map\": ";
  expect_folder_rejected(dir_.string(), {"model.safetensors.index.json", "JSON"});
  std::ofstream(path("model.safetensors.index.json")) << "{\"weights\": {}}";
  expect_folder_rejected(dir_.string(), {"weight_map"});
  fs::remove(path("model.safetensors.index.json"));
  expect_folder_rejected(dir_.string(), {"no model.safetensors"});
  expect_folder_rejected(path("absent"), {"absent", "not a folder"});
}

// A number JSON cannot hold (1e999) in a header or an index: an input error naming the file,
// not a json exception (exit 3; found by fuzz_safetensors_index).
TEST_F(SafetensorsTest, HugeJsonNumbersAreInputErrors) {
  write_raw(path("x.safetensors"), R"({"t":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", 4);
  expect_rejected(path("x.safetensors"), {"not valid JSON"});
  std::ofstream(path("model.safetensors.index.json")) << R"({"metadata": {"total_size": 1e999}, "weight_map": {}})";
  expect_folder_rejected(dir_.string(), {"model.safetensors.index.json", "not valid JSON"});
}

TEST_F(SafetensorsTest, TruncatedFile) {
  write_safetensors(path("ok.safetensors"), {{"big", filled(DType::f32, {64})}, {"small", filled(DType::f32, {2})}});
  const auto size = fs::file_size(path("ok.safetensors"));
  fs::copy_file(path("ok.safetensors"), path("cut.safetensors"));
  fs::resize_file(path("cut.safetensors"), size - 4);
  expect_rejected(path("cut.safetensors"), {"small", "beyond"});  // last tensor lost its tail
  fs::resize_file(path("cut.safetensors"), 20);
  expect_rejected(path("cut.safetensors"), {"header length"});
  fs::resize_file(path("cut.safetensors"), 5);
  expect_rejected(path("cut.safetensors"), {"truncated"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  write_raw(path("x.safetensors"), R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 1u << 20);
  expect_rejected(path("x.safetensors"), {"header length", "past the end"});
  write_raw(path("y.safetensors"), "{}", 0, ~std::uint64_t{0});  // would wrap around if added to 8
  expect_rejected(path("y.safetensors"), {"header length"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  write_raw(path("x.safetensors"), R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8);
  expect_rejected(path("x.safetensors"), {"'t'", "beyond the data block"});
  write_raw(path("y.safetensors"), R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8);
  expect_rejected(path("y.safetensors"), {"'t'", "begin 8 > end 4"});
  write_raw(path("z.safetensors"), R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8);
  expect_rejected(path("z.safetensors"), {"'t'", "data_offsets"});
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  write_raw(path("x.safetensors"),
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
  expect_rejected(path("x.safetensors"), {"'b'", "overlap", "'a'"});
}

TEST_F(SafetensorsTest, ShapeBytesMismatch) {
  write_raw(path("x.safetensors"), R"({"w":{"dtype":"F16","shape":[3,2],"data_offsets":[0,8]}})", 8);
  expect_rejected(path("x.safetensors"), {"'w'", "[3,2]", "12 bytes"});
  write_raw(path("y.safetensors"), R"({"w":{"dtype":"F16","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 8);
  expect_rejected(path("y.safetensors"), {"'w'"});  // overflowing shape, not a wrapped size
}

TEST_F(SafetensorsTest, UnknownDType) {
  write_raw(path("x.safetensors"), R"({"s":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4);
  expect_rejected(path("x.safetensors"), {"tensor 's' has unsupported dtype F8_E5M2"});
}

TEST_F(SafetensorsTest, BadJson) {
  write_raw(path("x.safetensors"), R"({"s":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);
  expect_rejected(path("x.safetensors"), {"not valid JSON"});
  write_raw(path("y.safetensors"), R"([1,2])", 0);
  expect_rejected(path("y.safetensors"), {"not a JSON object"});
  write_raw(path("z.safetensors"), R"({"s":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4);
  expect_rejected(path("z.safetensors"), {"'s'", "shape"});
  write_raw(path("m.safetensors"), R"({"__metadata__":{"k":1}})", 0);
  expect_rejected(path("m.safetensors"), {"__metadata__", "'k'"});
}

TEST_F(SafetensorsTest, PaddedHeaderFromOtherWriters) {
  // Trailing spaces are how the format pads; a misaligned tensor is still readable (copied).
  std::string h = R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[1,5]},"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  h.append((8 - h.size() % 8) % 8 + 8, ' ');
  write_raw(path("x.safetensors"), h, 5);
  SafetensorsFile f(path("x.safetensors"));
  const Tensor t = f.tensor("t");
  std::uint8_t expect[4] = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(t.raw(), expect, 4), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 4, 0u);
}

}  // namespace
}  // namespace tdiff
