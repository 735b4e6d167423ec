#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"
#include "model/config.h"

namespace tdiff {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The safetensors dtype names tdiff reads and writes. Two more are read as raw bytes (u8): the
// release checkpoint's F8_E8M0 block scales and its I8 tensors of packed FP4 codes
// (formats/release_format.h decodes both). Anything else (F8_E5M2, I16, U16, ...) is rejected
// when the header is read: tdiff has no DType for it.
struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"F64", DType::f64}, {"F32", DType::f32},         {"F16", DType::f16},
    {"BF16", DType::bf16}, {"F8_E4M3", DType::f8_e4m3}, {"I64", DType::i64},
    {"I32", DType::i32}, {"U8", DType::u8},            {"BOOL", DType::boolean},
};

constexpr DTypeName kByteFormats[] = {{"F8_E8M0", DType::u8}, {"I8", DType::u8}};

std::optional<DType> dtype_from_st(const std::string& s) {
  for (const auto& d : kDTypeNames)
    if (s == d.name) return d.dtype;
  for (const auto& d : kByteFormats)
    if (s == d.name) return d.dtype;
  return std::nullopt;
}

const char* dtype_to_st(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  return "?";
}

std::string errno_text() { return std::strerror(errno); }

// A JSON value as a non-negative integer that fits in 64 bits, or nullopt.
std::optional<std::uint64_t> as_size(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const json& e, std::uint64_t data_size) {
  if (!e.is_object()) input_error("{}: tensor '{}' header entry is not an object", path, name);
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) input_error("{}: tensor '{}' has no dtype string", path, name);
  if (sh == e.end() || !sh->is_array()) input_error("{}: tensor '{}' has no shape list", path, name);
  if (off == e.end() || !off->is_array() || off->size() != 2)
    input_error("{}: tensor '{}' has no data_offsets [begin, end]", path, name);
  TensorInfo info;
  info.name = name;
  auto dtype = dtype_from_st(dt->get<std::string>());
  if (!dtype) input_error("{}: tensor '{}' has unsupported dtype {}", path, name, dt->get<std::string>());
  info.dtype = *dtype;
  info.format = dt->get<std::string>();
  // Element count with overflow checks: a hostile header must not wrap around to a small size.
  std::uint64_t numel = 1;
  for (const auto& d : *sh) {
    auto v = as_size(d);
    if (!v || *v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      input_error("{}: tensor '{}' has a bad shape entry {}", path, name, d.dump());
    if (*v != 0 && numel > std::numeric_limits<std::uint64_t>::max() / *v)
      input_error("{}: tensor '{}' shape {} overflows", path, name, sh->dump());
    numel *= *v;
    info.shape.push_back(static_cast<std::int64_t>(*v));
  }
  auto b = as_size((*off)[0]), en = as_size((*off)[1]);
  if (!b || !en) input_error("{}: tensor '{}' has bad data_offsets {}", path, name, off->dump());
  if (*b > *en) input_error("{}: tensor '{}' data_offsets begin {} > end {}", path, name, *b, *en);
  if (*en > data_size)
    input_error("{}: tensor '{}' data_offsets end {} beyond the data block ({} bytes)", path, name, *en, data_size);
  const std::uint64_t esize = dtype_size(info.dtype);
  if (numel > std::numeric_limits<std::uint64_t>::max() / esize || numel * esize != *en - *b)
    input_error("{}: tensor '{}' shape {} of {} needs {} bytes, data_offsets give {}", path, name,
                shape_str(info.shape), dt->get<std::string>(), numel * esize, *en - *b);
  info.begin = static_cast<std::size_t>(*b);
  info.end = static_cast<std::size_t>(*en);
  return info;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) input_error("{}: cannot open ({})", path, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const auto err = errno_text();
    ::close(fd);
    input_error("{}: cannot stat ({})", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    input_error("{}: not a regular file", path);
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    input_error("{}: truncated safetensors file ({} bytes, the header length alone takes 8)", path, file_size);
  }
  // MAP_PRIVATE with write permission: tensor views are mutable (Tensor hands out non-const
  // pointers), and a write then lands in a private copy instead of faulting or reaching the file.
  void* base = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const auto map_err = errno_text();
  fd_ = std::shared_ptr<int>(new int(fd), [](int* f) { ::close(*f), delete f; });  // kept for pread (fd())
  if (base == MAP_FAILED) input_error("{}: cannot map ({})", path, map_err);
  mapping_ = std::shared_ptr<void>(base, [file_size](void* p) { ::munmap(p, file_size); });
  mapped_bytes_ = file_size;
  const auto* bytes = static_cast<const std::byte*>(base);

  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<std::uint8_t>(bytes[i]);
  if (header_len > file_size - 8)
    input_error("{}: header length {} runs past the end of the file ({} bytes)", path, header_len, file_size);
  const std::uint64_t data_size = file_size - 8 - header_len;
  data_ = bytes + 8 + header_len;

  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(data_));
  } catch (const json::exception& e) {  // syntax errors, and numbers out of range (1e999)
    input_error("{}: header is not valid JSON ({})", path, e.what());
  }
  if (!header.is_object()) input_error("{}: header is not a JSON object", path);

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) input_error("{}: __metadata__ is not an object", path);
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) input_error("{}: __metadata__ value '{}' is not a string", path, k);
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    infos_.emplace(name, parse_entry(path, name, entry, data_size));
  }

  // Ranges must not overlap (empty tensors take no bytes and overlap nothing).
  std::vector<const TensorInfo*> by_begin;
  for (const auto& [name, info] : infos_)
    if (info.end > info.begin) by_begin.push_back(&info);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_begin.size(); ++i)
    if (by_begin[i]->begin < by_begin[i - 1]->end)
      input_error("{}: tensor '{}' bytes [{}, {}) overlap tensor '{}' [{}, {})", path, by_begin[i]->name,
                  by_begin[i]->begin, by_begin[i]->end, by_begin[i - 1]->name, by_begin[i - 1]->begin,
                  by_begin[i - 1]->end);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& [name, info] : infos_) out.push_back(name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) input_error("{}: no tensor '{}'", path_, name);
  return it->second;
}

void SafetensorsFile::release_pages() const {
  // Nothing writes through the views (the mapping is private only so that a stray write
  // cannot reach the file), so the pages dropped here equal the file's.
  if (mapping_) ::madvise(mapping_.get(), mapped_bytes_, MADV_DONTNEED);
}

std::optional<std::uint64_t> SafetensorsFile::file_offset(const void* p, std::size_t bytes) const {
  const auto base = reinterpret_cast<std::uintptr_t>(mapping_.get()), at = reinterpret_cast<std::uintptr_t>(p);
  if (!mapping_ || at < base || at - base > mapped_bytes_ || bytes > mapped_bytes_ - (at - base)) return std::nullopt;
  return at - base;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  if (static_cast<int>(i.shape.size()) > kMaxRank)
    input_error("{}: tensor '{}' has rank {} (tdiff handles up to {})", path_, name, i.shape.size(), kMaxRank);
  auto* p = const_cast<std::byte*>(data_ + i.begin);
  // The format does not promise aligned offsets; typed access needs them, so a misaligned
  // tensor (from a foreign writer) is copied out instead of viewed.
  if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(i.dtype) != 0) {
    Tensor t(i.dtype, i.shape);
    std::memcpy(t.raw(), p, i.end - i.begin);
    return t;
  }
  return Tensor::view(i.dtype, i.shape, p, mapping_);
}

ModelWeights::ModelWeights(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) input_error("{}: not a folder", dir);
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  // transformers looks for the single file first, so a folder holding both loads the same here.
  if (fs::exists(single, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& name : files_[0]->names()) where_[name] = 0;
  } else if (fs::exists(index, ec)) {
    const std::string ipath = index.string();
    json j;
    try {
      j = json::parse(read_text_file(ipath));
    } catch (const json::exception& e) {  // syntax errors, and numbers out of range (1e999)
      input_error("{}: not valid JSON ({})", ipath, e.what());
    }
    auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (wm == j.end() || !wm->is_object()) input_error("{}: no 'weight_map' object", ipath);
    std::map<std::string, std::string> name_to_file;
    std::set<std::string> shard_names;
    for (auto& [name, f] : wm->items()) {
      if (!f.is_string()) input_error("{}: weight_map entry for tensor '{}' is not a file name", ipath, name);
      // Shards lie in the model folder: a name with a folder in it could point anywhere.
      const fs::path fp(f.get<std::string>());
      if (fp.empty() || fp.has_parent_path() || fp == "." || fp == "..")
        input_error("{}: weight_map entry for tensor '{}' is \"{}\", not a file name in the model folder", ipath, name,
                    f.get<std::string>());
      name_to_file[name] = f.get<std::string>();
      shard_names.insert(f.get<std::string>());
    }
    std::map<std::string, std::size_t> shard_index;
    for (const auto& s : shard_names) {  // sorted, so files() is sorted too
      const fs::path sp = fs::path(dir) / s;
      if (!fs::is_regular_file(sp, ec))
        input_error("{}: shard '{}' listed in model.safetensors.index.json is missing", dir, s);
      shard_index[s] = files_.size();
      files_.push_back(std::make_unique<SafetensorsFile>(sp.string()));
    }
    for (const auto& [name, s] : name_to_file) {
      const std::size_t k = shard_index.at(s);
      if (!files_[k]->has(name))
        input_error("{}: tensor '{}' is listed in model.safetensors.index.json but absent from {}", dir, name, s);
      where_[name] = k;
    }
  } else {
    input_error("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
}

const TensorInfo& ModelWeights::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) input_error("{}: no tensor '{}'", dir_, name);
  return files_[it->second]->info(name);
}

Tensor ModelWeights::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) input_error("{}: no tensor '{}'", dir_, name);
  return files_[it->second]->tensor(name);
}

std::vector<std::string> ModelWeights::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, k] : where_) out.push_back(name);
  return out;
}

void release_resident_pages(const void* begin, std::size_t bytes) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
  const auto hi = (reinterpret_cast<std::uintptr_t>(begin) + bytes) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void ModelWeights::release_pages() const {
  for (const auto& f : files_) f->release_pages();
}

std::optional<ModelWeights::FileSpan> ModelWeights::locate(const void* p, std::size_t bytes) const {
  for (const auto& f : files_)
    if (const auto offset = f->file_offset(p, bytes)) return FileSpan{f->fd(), f->path(), *offset};
  return std::nullopt;
}

std::vector<std::string> ModelWeights::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Writes all of `n` bytes at `offset` or throws.
void pwrite_all(int fd, const void* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, c, std::min<std::size_t>(n, std::size_t{1} << 30), static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      input_error("{}: write failed ({})", path, errno_text());
    }
    c += w;
    offset += static_cast<std::uint64_t>(w);
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

SafetensorsStream::SafetensorsStream(const std::string& path, std::vector<Entry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), entries_(std::move(entries)) {
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  json header = json::object();
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (i > 0 && entries_[i - 1].name == e.name) input_error("{}: tensor '{}' given twice", path, e.name);
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offsets_.push_back(offset);
    offset += e.bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  for (auto& o : offsets_) o += 8 + text.size();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) input_error("{}: cannot create ({})", path, errno_text());
  write(0, len, 8);
  write(8, text.data(), text.size());
}

SafetensorsStream::~SafetensorsStream() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t SafetensorsStream::index(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  throw std::logic_error(fmt::format("{}: no entry '{}'", path_, name));
}

void SafetensorsStream::write(std::uint64_t file_offset, const void* data, std::size_t n) {
  pwrite_all(fd_, data, n, file_offset, path_);
#ifdef __linux__
  // Start writing these pages to disk now (a hint; no wait): on a host with 128 GB the kernel
  // would otherwise hold over 12 GB dirty before it writes any, and close()'s fsync would
  // write a release's shards only after every value was drawn.
  ::sync_file_range(fd_, static_cast<off_t>(file_offset), static_cast<off_t>(n), SYNC_FILE_RANGE_WRITE);
#endif
}

void SafetensorsStream::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const auto err = errno_text();
    ::close(fd);
    input_error("{}: fsync failed ({})", path_, err);
  }
  if (::close(fd) != 0) input_error("{}: close failed ({})", path_, errno_text());
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Name order makes the file a function of its content, whatever order the caller used.
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  json header = json::object();
  std::size_t offset = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = *sorted[i];
    if (name.empty() || name == "__metadata__") input_error("{}: bad tensor name '{}'", path, name);
    if (i > 0 && sorted[i - 1]->first == name) input_error("{}: tensor '{}' given twice", path, name);
    if (!t.defined()) input_error("{}: tensor '{}' has no data", path, name);
    header[name] = {{"dtype", dtype_to_st(t.dtype())}, {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data block starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  AtomicFile out(path);
  out.write(len, 8);
  out.write(text);
  for (const auto* p : sorted) out.write(p->second.raw(), p->second.nbytes());
  out.commit();
}

}  // namespace tdiff
