#include "casefile/h5io.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include "base/error.h"
#include "base/temp_files.h"

// Storage of tdiff dtypes (every file type little-endian, readable by h5py and h5dump):
//   f64, f32        IEEE float
//   f16             IEEE half built with H5Tset_fields (h5py reads it as float16)
//   bf16            uint16 bit patterns + attribute dtype="bf16" (HDF5 has no bf16 type)
//   f8_e4m3         uint8 bit patterns  + attribute dtype="f8_e4m3" (no inf; HDF5's float
//                   conversions would not respect the "fn" NaN encoding)
//   i64, i32, u8    integers
//   boolean         uint8 0/1           + attribute dtype="bool" (h5py's enum bools are read too)
// Attributes written here are scalar variable-length UTF-8 strings (h5py reads them as str).

namespace tdiff {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // compress datasets above 1 MiB

// HDF5 prints its whole error stack to stderr by default; tdiff reports one line instead.
void quiet_hdf5() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// The innermost message of the current HDF5 error stack ("truncated file: eof = ...").
// Must be called right after the failing call: every API call clears the stack.
std::string h5_detail() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        if (n == 0 && e->desc) *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &out);
  if (out.empty()) return "HDF5 error";
  // A failed file write carries the system's message inside a multi-line dump of its
  // arguments ("... errno = 28, error message = 'No space left on device', buf = ..."): keep it.
  const std::string key = "error message = '";
  if (auto at = out.find(key); at != std::string::npos) {
    const auto end = out.find('\'', at + key.size());
    if (end != std::string::npos) return out.substr(at + key.size(), end - at - key.size());
  }
  std::replace(out.begin(), out.end(), '\n', ' ');  // the error must stay one line
  return out;
}

// Closes an HDF5 identifier of any kind when it goes out of scope.
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) : id_(id) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, -1)) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) { reset(); id_ = std::exchange(o.id_, -1); }
    return *this;
  }
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, -1); }
  void reset() {
    if (id_ >= 0 && H5Iis_valid(id_) > 0) H5Idec_ref(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
};

// "x/y" and "/x/y/" -> "/x/y"; "" and "/" -> "/".
std::string norm_path(const std::string& p) {
  std::string out = "/";
  std::size_t i = 0;
  while (i < p.size()) {
    while (i < p.size() && p[i] == '/') ++i;
    std::size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) {
      if (out.size() > 1) out += '/';
      out.append(p, i, j - i);
    }
    i = j;
  }
  return out;
}

std::vector<std::string> path_parts(const std::string& p) {
  std::vector<std::string> parts;
  const std::string n = norm_path(p);
  std::size_t i = 1;
  while (i < n.size()) {
    std::size_t j = n.find('/', i);
    if (j == std::string::npos) j = n.size();
    parts.push_back(n.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// True when every component of `path` exists (H5Lexists needs the parents to exist).
bool path_exists(hid_t loc, const std::string& path) {
  std::string sofar;
  for (const auto& part : path_parts(path)) {
    sofar += "/" + part;
    if (H5Lexists(loc, sofar.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

Hid open_read(const std::string& file) {
  quiet_hdf5();
  std::error_code ec;
  if (!fs::exists(file, ec)) input_error("{}: no such file", file);
  if (fs::is_directory(file, ec)) input_error("{}: is a folder, not an HDF5 file", file);
  // HDF5 says "not an HDF5 file" for a file it may not open; say what is wrong instead.
  if (::access(file.c_str(), R_OK) != 0) input_error("{}: cannot read the file ({})", file, std::strerror(errno));
  if (H5Fis_hdf5(file.c_str()) <= 0) input_error("{}: not an HDF5 file", file);
  Hid f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.ok()) input_error("{}: cannot open the HDF5 file, it is truncated or damaged ({})", file, h5_detail());
  return f;
}

// Opens a group or dataset; `what` words the error ("dataset", "group", "object").
Hid open_object(hid_t f, const std::string& file, const std::string& path, const char* what) {
  const std::string p = norm_path(path);
  if (!path_exists(f, p)) input_error("{}: {} '{}' is missing", file, what, p);
  Hid o(H5Oopen(f, p.c_str(), H5P_DEFAULT));
  if (!o.ok()) input_error("{}: cannot open '{}' ({})", file, p, h5_detail());
  return o;
}

Hid make_f16_type() {
  Hid t(H5Tcopy(H5T_IEEE_F32LE));
  // sign bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15: IEEE binary16.
  if (H5Tset_fields(t.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(t.get(), 2) < 0 || H5Tset_ebias(t.get(), 15) < 0)
    throw std::runtime_error("HDF5: cannot build the float16 type");
  return t;
}

bool float_layout(hid_t t, std::size_t spos, std::size_t epos, std::size_t esize, std::size_t msize, std::size_t bias) {
  std::size_t s, e, es, m, ms;
  if (H5Tget_fields(t, &s, &e, &es, &m, &ms) < 0) return false;
  return s == spos && e == epos && es == esize && m == 0 && ms == msize && H5Tget_ebias(t) == bias;
}

// A string attribute of any flavour (variable or fixed length, one or more elements);
// several elements are joined with newlines.
std::string read_string_attr(hid_t attr, hid_t ftype) {
  Hid space(H5Aget_space(attr));
  const auto n = static_cast<std::size_t>(std::max<hssize_t>(H5Sget_simple_extent_npoints(space.get()), 0));
  std::string out;
  if (H5Tis_variable_str(ftype) > 0) {
    Hid mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(ftype));
    std::vector<char*> buf(n, nullptr);
    if (n && H5Aread(attr, mt.get(), buf.data()) < 0) throw std::runtime_error(h5_detail());
    for (std::size_t i = 0; i < n; ++i) {
      if (i) out += '\n';
      if (buf[i]) out += buf[i];
    }
#if H5_VERSION_GE(1, 12, 0)
    H5Treclaim(mt.get(), space.get(), H5P_DEFAULT, buf.data());
#else
    H5Dvlen_reclaim(mt.get(), space.get(), H5P_DEFAULT, buf.data());
#endif
  } else {
    const std::size_t size = H5Tget_size(ftype);
    Hid mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt.get(), size);
    H5Tset_strpad(mt.get(), H5T_STR_NULLPAD);
    H5Tset_cset(mt.get(), H5Tget_cset(ftype));
    std::vector<char> buf(n * size + 1, '\0');
    if (n && H5Aread(attr, mt.get(), buf.data()) < 0) throw std::runtime_error(h5_detail());
    for (std::size_t i = 0; i < n; ++i) {
      if (i) out += '\n';
      std::string s(buf.data() + i * size, size);
      out += s.substr(0, s.find('\0'));
    }
  }
  return out;
}

// Numeric attributes (written by other tools) as text: "3", "0.5", "[1, 2, 3]".
std::string read_numeric_attr(hid_t attr, bool integer) {
  Hid space(H5Aget_space(attr));
  const auto n = static_cast<std::size_t>(std::max<hssize_t>(H5Sget_simple_extent_npoints(space.get()), 0));
  std::vector<std::string> items;
  if (integer) {
    std::vector<std::int64_t> v(n);
    if (n && H5Aread(attr, H5T_NATIVE_INT64, v.data()) < 0) throw std::runtime_error(h5_detail());
    for (auto x : v) items.push_back(fmt::format("{}", x));
  } else {
    std::vector<double> v(n);
    if (n && H5Aread(attr, H5T_NATIVE_DOUBLE, v.data()) < 0) throw std::runtime_error(h5_detail());
    for (auto x : v) items.push_back(fmt::format("{}", x));
  }
  if (H5Sget_simple_extent_ndims(space.get()) == 0 && items.size() == 1) return items[0];
  return fmt::format("[{}]", fmt::join(items, ", "));
}

std::map<std::string, std::string> read_attrs(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx,
              [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
                static_cast<std::vector<std::string>*>(data)->push_back(name);
                return 0;
              },
              &names);
  std::map<std::string, std::string> out;
  for (const auto& name : names) {
    Hid a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
    if (!a.ok()) continue;
    Hid t(H5Aget_type(a.get()));
    switch (H5Tget_class(t.get())) {
      case H5T_STRING: out[name] = read_string_attr(a.get(), t.get()); break;
      case H5T_INTEGER: out[name] = read_numeric_attr(a.get(), true); break;
      case H5T_FLOAT: out[name] = read_numeric_attr(a.get(), false); break;
      default: break;  // compound, reference, ...: not representable as text; skipped
    }
  }
  return out;
}

std::string dtype_attr(hid_t obj) {
  if (H5Aexists(obj, "dtype") <= 0) return {};
  Hid a(H5Aopen(obj, "dtype", H5P_DEFAULT));
  Hid t(H5Aget_type(a.get()));
  if (H5Tget_class(t.get()) != H5T_STRING) return {};
  return read_string_attr(a.get(), t.get());
}

// Children names of a group, in HDF5's name order.
std::vector<std::string> child_names(hid_t group) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx,
             [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
               static_cast<std::vector<std::string>*>(data)->push_back(name);
               return 0;
             },
             &names);
  return names;
}

// Bytes the datasets under `name` (relative to loc) occupy in their file: what copying the
// object into another file writes, give or take its headers.
std::uintmax_t storage_bytes(hid_t loc, const char* name) {
  Hid obj(H5Oopen(loc, name, H5P_DEFAULT));
  if (!obj.ok()) return 0;
  switch (H5Iget_type(obj.get())) {
    case H5I_DATASET: return H5Dget_storage_size(obj.get());
    case H5I_GROUP: {
      std::uintmax_t sum = 0;
      for (const auto& child : child_names(obj.get())) sum += storage_bytes(obj.get(), child.c_str());
      return sum;
    }
    default: return 0;
  }
}

void collect_datasets(hid_t group, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& name : child_names(group)) {
    Hid o(H5Oopen(group, name.c_str(), H5P_DEFAULT));
    if (!o.ok()) continue;  // dangling soft or external link
    const std::string full = prefix == "/" ? "/" + name : prefix + "/" + name;
    const H5I_type_t kind = H5Iget_type(o.get());
    if (kind == H5I_DATASET) out.push_back(full);
    else if (kind == H5I_GROUP) collect_datasets(o.get(), full, out);
  }
}

// File and memory types of a dtype, and the dtype attribute it needs (if any).
struct Storage {
  Hid file_type, mem_type;
  const char* tag = nullptr;
};

Storage storage_for(DType t) {
  Storage s;
  auto copy = [](hid_t id) { return Hid(H5Tcopy(id)); };
  switch (t) {
    case DType::f64: s.file_type = copy(H5T_IEEE_F64LE); s.mem_type = copy(H5T_NATIVE_DOUBLE); break;
    case DType::f32: s.file_type = copy(H5T_IEEE_F32LE); s.mem_type = copy(H5T_NATIVE_FLOAT); break;
    case DType::f16: s.file_type = make_f16_type(); s.mem_type = make_f16_type(); break;
    case DType::bf16: s.file_type = copy(H5T_STD_U16LE); s.mem_type = copy(H5T_NATIVE_UINT16); s.tag = "bf16"; break;
    case DType::f8_e4m3: s.file_type = copy(H5T_STD_U8LE); s.mem_type = copy(H5T_NATIVE_UINT8); s.tag = "f8_e4m3"; break;
    case DType::i64: s.file_type = copy(H5T_STD_I64LE); s.mem_type = copy(H5T_NATIVE_INT64); break;
    case DType::i32: s.file_type = copy(H5T_STD_I32LE); s.mem_type = copy(H5T_NATIVE_INT32); break;
    case DType::u8: s.file_type = copy(H5T_STD_U8LE); s.mem_type = copy(H5T_NATIVE_UINT8); break;
    case DType::boolean: s.file_type = copy(H5T_STD_U8LE); s.mem_type = copy(H5T_NATIVE_UINT8); s.tag = "bool"; break;
  }
  return s;
}

// The dtype a dataset reads as, and the memory type that reads it (HDF5 converts other
// integer and float widths to i64 / f64).
std::pair<DType, Hid> read_type(hid_t ftype, const std::string& tag, const std::string& file, const std::string& path) {
  const std::size_t size = H5Tget_size(ftype);
  switch (H5Tget_class(ftype)) {
    case H5T_FLOAT:
      if (size == 8) return {DType::f64, Hid(H5Tcopy(H5T_NATIVE_DOUBLE))};
      if (size == 4) return {DType::f32, Hid(H5Tcopy(H5T_NATIVE_FLOAT))};
      if (size == 2 && float_layout(ftype, 15, 10, 5, 10, 15)) return {DType::f16, make_f16_type()};
      if (size == 2 && float_layout(ftype, 15, 7, 8, 7, 127)) return {DType::bf16, Hid(H5Tcopy(ftype))};
      return {DType::f64, Hid(H5Tcopy(H5T_NATIVE_DOUBLE))};
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(ftype) == H5T_SGN_2;
      // Bit patterns of types HDF5 lacks are tagged; other tags are descriptive only.
      if (tag == "bf16" || tag == "f16" || tag == "f8_e4m3" || tag == "bool") {
        const DType dt = tag == "bool" ? DType::boolean : *parse_dtype(tag);
        if (dtype_size(dt) != size || is_signed)
          input_error("{}: dataset '{}' has dtype attribute '{}' that does not fit its {}-byte integer type", file,
                      path, tag, size);
        return {dt, Hid(H5Tcopy(size == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT8))};
      }
      if (size == 8 && is_signed) return {DType::i64, Hid(H5Tcopy(H5T_NATIVE_INT64))};
      if (size == 4 && is_signed) return {DType::i32, Hid(H5Tcopy(H5T_NATIVE_INT32))};
      if (size == 1 && !is_signed) return {DType::u8, Hid(H5Tcopy(H5T_NATIVE_UINT8))};
      if (size == 8 && !is_signed)
        input_error("{}: dataset '{}' is uint64, which tdiff does not read", file, path);
      return {DType::i64, Hid(H5Tcopy(H5T_NATIVE_INT64))};
    }
    case H5T_ENUM: {
      // h5py stores numpy bool as an int8 enum {FALSE: 0, TRUE: 1}; read the raw bytes.
      if (size == 1 && H5Tget_nmembers(ftype) == 2) return {DType::boolean, Hid(H5Tget_native_type(ftype, H5T_DIR_ASCEND))};
      break;
    }
    default: break;
  }
  input_error("{}: dataset '{}' has an HDF5 type tdiff cannot read as a tensor", file, path);
}

// Chunk shape of about 1 MiB: trailing dimensions whole, leading ones cut.
std::vector<hsize_t> chunk_dims(const Shape& shape, std::size_t elem) {
  std::vector<hsize_t> c(shape.begin(), shape.end());
  std::size_t rest = elem;
  for (auto d : shape) rest *= static_cast<std::size_t>(d);
  for (std::size_t i = 0; i < c.size(); ++i) {
    rest /= static_cast<std::size_t>(shape[i]);  // bytes of one slice along dimension i
    if (rest >= kChunkBytes) { c[i] = 1; continue; }
    c[i] = std::clamp<hsize_t>(kChunkBytes / rest, 1, c[i]);
    break;
  }
  return c;
}

void write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  if (H5Aexists(obj, name.c_str()) > 0 && H5Adelete(obj, name.c_str()) < 0) throw std::runtime_error(h5_detail());
  // Fixed-length strings: HDF5 1.10 crashes copying variable-length attributes held in dense
  // attribute storage (H5Ocopy of a group with many attributes, as every case update does).
  Hid t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), std::max<std::size_t>(value.size(), 1));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR));
  Hid a(H5Acreate2(obj, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (!a.ok() || H5Awrite(a.get(), t.get(), padded.data()) < 0) throw std::runtime_error(h5_detail());
}

// Copies every attribute of `from` to `to` in its own type (the root group cannot be copied
// with H5Ocopy).
void copy_attrs(hid_t from, hid_t to) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(from, H5_INDEX_NAME, H5_ITER_INC, &idx,
              [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
                static_cast<std::vector<std::string>*>(data)->push_back(name);
                return 0;
              },
              &names);
  for (const auto& name : names) {
    Hid a(H5Aopen(from, name.c_str(), H5P_DEFAULT));
    Hid ft(H5Aget_type(a.get()));
    Hid mt(H5Tget_native_type(ft.get(), H5T_DIR_ASCEND));
    Hid space(H5Aget_space(a.get()));
    const auto n = static_cast<std::size_t>(std::max<hssize_t>(H5Sget_simple_extent_npoints(space.get()), 0));
    std::vector<std::byte> buf(std::max<std::size_t>(n * H5Tget_size(mt.get()), 1));
    if (H5Aread(a.get(), mt.get(), buf.data()) < 0) throw std::runtime_error(h5_detail());
    Hid b(H5Acreate2(to, name.c_str(), ft.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
    const herr_t rc = b.ok() ? H5Awrite(b.get(), mt.get(), buf.data()) : -1;
    if (H5Tdetect_class(mt.get(), H5T_VLEN) > 0 || H5Tis_variable_str(mt.get()) > 0) {
#if H5_VERSION_GE(1, 12, 0)
      H5Treclaim(mt.get(), space.get(), H5P_DEFAULT, buf.data());
#else
      H5Dvlen_reclaim(mt.get(), space.get(), H5P_DEFAULT, buf.data());
#endif
    }
    if (rc < 0) throw std::runtime_error(h5_detail());
  }
}

}  // namespace

std::vector<std::string> h5_list_datasets(const std::string& file, const std::string& group) {
  Hid f = open_read(file);
  Hid g = open_object(f.get(), file, group, "group");
  if (H5Iget_type(g.get()) != H5I_GROUP) input_error("{}: '{}' is not a group", file, norm_path(group));
  std::vector<std::string> out;
  collect_datasets(g.get(), norm_path(group), out);
  std::sort(out.begin(), out.end());
  return out;
}

// Not declared in h5io.h (declared in case_file.h): the direct children of a group.
std::vector<std::string> h5_list_children(const std::string& file, const std::string& group) {
  Hid f = open_read(file);
  Hid g = open_object(f.get(), file, group, "group");
  if (H5Iget_type(g.get()) != H5I_GROUP) input_error("{}: '{}' is not a group", file, norm_path(group));
  return child_names(g.get());
}

bool h5_exists(const std::string& file, const std::string& path) {
  Hid f = open_read(file);
  return path_exists(f.get(), path);
}

namespace {
// A declared shape is checked before anything is allocated: its element count times the
// element size must neither wrap around (a 1-byte buffer that H5Dread then overruns) nor exceed
// this machine's memory (HDF5 reads an unwritten dataset as fill values, so a tiny file can
// declare terabytes).
void check_dataset_size(const std::vector<hsize_t>& dims, std::size_t elem, const std::string& file,
                        const std::string& path) {
  constexpr auto kMax = static_cast<unsigned __int128>(std::numeric_limits<std::int64_t>::max());
  unsigned __int128 bytes = elem;
  for (hsize_t d : dims) {
    bytes *= d;
    if (bytes > kMax) bytes = kMax + 1;  // saturate: already too large
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const auto memory = static_cast<unsigned __int128>(pages > 0 && page > 0 ? pages : 0) * static_cast<unsigned>(page > 0 ? page : 0);
  std::string shape;
  for (hsize_t d : dims) shape += (shape.empty() ? "" : ",") + std::to_string(d);
  if (bytes > kMax)
    input_error("{}: dataset '{}' declares shape [{}], too many bytes to address", file, path, shape);
  if (memory > 0 && bytes > memory)
    input_error("{}: dataset '{}' declares shape [{}], {:.3g} GB, more than this machine's memory ({:.3g} GB)", file,
                path, shape, static_cast<double>(bytes) / 1e9, static_cast<double>(memory) / 1e9);
}
}  // namespace

namespace {
// A dataset opened for reading: its dtype, the memory type that reads it and its dimensions
// (what h5_read and h5_dataset_info both need; the file stays open while `file` lives).
struct OpenDataset {
  Hid file, dataset, mem_type;
  DType dtype;
  std::vector<hsize_t> dims;
  std::string path;  // normalised, for messages
};

OpenDataset open_dataset(const std::string& file, const std::string& path) {
  OpenDataset o;
  o.file = open_read(file);
  o.path = norm_path(path);
  o.dataset = open_object(o.file.get(), file, o.path, "dataset");
  if (H5Iget_type(o.dataset.get()) != H5I_DATASET) input_error("{}: '{}' is a group, not a dataset", file, o.path);
  Hid ftype(H5Dget_type(o.dataset.get()));
  std::tie(o.dtype, o.mem_type) = read_type(ftype.get(), dtype_attr(o.dataset.get()), file, o.path);
  Hid space(H5Dget_space(o.dataset.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > kMaxRank)
    input_error("{}: dataset '{}' has rank {} (tdiff reads up to {})", file, o.path, rank, kMaxRank);
  o.dims.resize(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), o.dims.data(), nullptr);
  return o;
}
}  // namespace

namespace {
// A large contiguous dataset stored in the memory type (a reference tensor: float64, no
// filter) read with pread on every OpenMP thread: H5Dread copies it on one thread, about a
// second per GB on the 2-core VM with the page faults of the fresh buffer, and a real-width
// run reads GBs.
// False (nothing read) when the dataset is chunked, converted, unallocated or beyond the
// file's end: H5Dread then reads it (or says what is wrong).
bool read_contiguous(const OpenDataset& d, const std::string& file, Tensor& t) {
  constexpr std::size_t kMinBytes = std::size_t{32} << 20, kBlock = std::size_t{8} << 20;
  const std::size_t bytes = t.nbytes();
  if (bytes < kMinBytes) return false;
  Hid ftype(H5Dget_type(d.dataset.get()));
  if (H5Tequal(ftype.get(), d.mem_type.get()) <= 0) return false;
  const haddr_t offset = H5Dget_offset(d.dataset.get());
  if (offset == HADDR_UNDEF || H5Dget_storage_size(d.dataset.get()) != bytes) return false;
  // HDF5's own descriptor (pread leaves its offset alone): the file it opened, even if the
  // path was replaced since.
  Hid fapl(H5Fget_access_plist(d.file.get()));
  void* handle = nullptr;
  if (H5Pget_driver(fapl.get()) != H5FD_SEC2 || H5Fget_vfd_handle(d.file.get(), fapl.get(), &handle) < 0 || !handle)
    return false;
  const int fd = *static_cast<int*>(handle);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (offset > size || bytes > size - offset) return false;  // beyond the end (no wrap-around)
  auto* out = reinterpret_cast<char*>(t.raw());
  const auto blocks = static_cast<std::int64_t>((bytes + kBlock - 1) / kBlock);
  bool ok = true;
#pragma omp parallel for schedule(dynamic, 1) reduction(&& : ok)
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::size_t at = static_cast<std::size_t>(b) * kBlock;
    const std::size_t end = std::min(bytes, at + kBlock);
    while (ok && at < end) {
      const ssize_t n = ::pread(fd, out + at, end - at, static_cast<off_t>(offset + at));
      if (n > 0) at += static_cast<std::size_t>(n);
      else if (!(n < 0 && errno == EINTR)) ok = false;
    }
  }
  return ok;
}
}  // namespace

Tensor h5_read(const std::string& file, const std::string& path) {
  const OpenDataset d = open_dataset(file, path);
  check_dataset_size(d.dims, dtype_size(d.dtype), file, d.path);
  Tensor t(d.dtype, Shape(d.dims.begin(), d.dims.end()));
  if (read_contiguous(d, file, t)) return t;
  if (t.numel() > 0 && H5Dread(d.dataset.get(), d.mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    input_error("{}: dataset '{}' cannot be read, the file is truncated or damaged ({})", file, d.path, h5_detail());
  return t;
}

H5DatasetInfo h5_dataset_info(const std::string& file, const std::string& path) {
  const OpenDataset d = open_dataset(file, path);
  return {d.dtype, Shape(d.dims.begin(), d.dims.end())};
}

std::map<std::string, std::string> h5_read_attrs(const std::string& file, const std::string& path) {
  Hid f = open_read(file);
  Hid o = open_object(f.get(), file, path, "object");
  try {
    return read_attrs(o.get());
  } catch (const std::runtime_error& e) {
    input_error("{}: attributes of '{}' cannot be read ({})", file, norm_path(path), e.what());
  }
}

// Updates start from a copy of `copy_from`, made lazily per top-level object: replacing a
// whole top-level group (say /reference) never copies the old one, so a case file that is
// updated many times does not accumulate the dead space HDF5 leaves behind deleted objects.
struct H5Writer::Impl {
  std::string path, tmp, source;
  Hid file, src;
  std::set<std::string> pending;  // top-level names of `src` not copied yet
  bool committed = false;
  TempRegistration reg;  // removes `tmp` on SIGINT/SIGTERM
  std::future<void> copying;       // Copy::bytes: the byte copy into `tmp`, on its own thread
  std::atomic<bool> stop_copy{false};

  // Also when the constructor fails: a temporary HDF5 created and could not finish is removed.
  ~Impl() {
    if (copying.valid()) {  // stopped, not waited for to the end
      stop_copy = true;
      try {
        copying.get();
      } catch (const std::exception&) {
      }
    }
    file.reset();
    src.reset();
    std::error_code ec;
    if (!committed && !tmp.empty()) fs::remove(tmp, ec);
  }

  [[noreturn]] void fail(const std::string& what) { input_error("{}: {} ({})", path, what, h5_detail()); }

  // Before every change: a byte copy still under way is waited for and opened.
  void check_open() {
    if (committed) throw std::logic_error("H5Writer used after commit(): " + path);
    if (!copying.valid()) return;
    std::future<void> f = std::move(copying);
    f.get();  // the copy's InputError, if it failed
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
    file = Hid(H5Fopen(tmp.c_str(), H5F_ACC_RDWR, fapl.get()));
    if (!file.ok()) input_error("{}: cannot open the copy {} for writing ({})", path, tmp, h5_detail());
  }

  // An InputError unless the folder of the temporary file has `bytes` free (plus a margin for
  // HDF5's metadata). HDF5 1.10 does not always fail cleanly when a write meets a full disk
  // (H5Ocopy crashes), so the writer checks before each copy of a top-level object (its
  // datasets' stored bytes) and each new dataset (its uncompressed bytes: an upper bound).
  void ensure_space(std::uintmax_t bytes, const char* what) const {
    constexpr std::uintmax_t kMargin = 4u << 20;
    std::error_code ec;
    const fs::space_info sp = fs::space(fs::absolute(tmp, ec).parent_path(), ec);
    if (ec || sp.available >= bytes + kMargin) return;
    input_error("{}: not enough free disk space to {} ({:.1f} MiB needed, {:.1f} MiB free in {})", path, what,
                double(bytes + kMargin) / (1 << 20), double(sp.available) / (1 << 20),
                fs::absolute(tmp, ec).parent_path().string());
  }

  // Copies the top-level object `top` from the source, if not done yet. By value: callers
  // pass elements of `pending`, which the erase would free.
  void materialize(std::string top) {
    if (!pending.erase(top)) return;
    ensure_space(storage_bytes(src.get(), top.c_str()), "rewrite the case file");
    if (H5Ocopy(src.get(), top.c_str(), file.get(), top.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
      input_error("{}: cannot copy '/{}' from {} ({})", path, top, source, h5_detail());
  }
  void touch(const std::string& p) {
    auto parts = path_parts(p);
    if (!parts.empty()) materialize(parts[0]);
  }
};

namespace {
// A file without any write permission is the user saying "do not change this": tdiff refuses
// to replace it (rename would succeed in a writable folder, and root ignores the mode).
void refuse_read_only(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // a new file
  const bool denied = ::access(path.c_str(), W_OK) != 0 && errno == EACCES;  // EROFS: said when creating
  if ((st.st_mode & 0222) == 0 || denied)
    input_error("{}: the file is read-only (mode {:04o}); tdiff does not replace a read-only file (make it writable "
                "to allow it)", path, st.st_mode & 07777);
}

// Creates the (empty) temporary file with open(2), so that a full disk or a folder that
// may not be written gets the system's own reason, before HDF5 touches it.
void create_temp_file(const std::string& path, const std::string& tmp) {
  const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    std::error_code ec;
    input_error("{}: cannot create a temporary file in '{}' ({})", path,
                fs::absolute(tmp, ec).parent_path().string(), std::strerror(errno));
  }
  ::close(fd);
}

// The replaced file's mode (and, for root, its owner) carry over to its replacement.
void keep_permissions(const std::string& path, const std::string& tmp) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (::chmod(tmp.c_str(), st.st_mode & 07777) != 0)
    input_error("{}: cannot give the new file the old one's mode {:04o} ({})", path, st.st_mode & 07777,
                std::strerror(errno));
  if (::geteuid() == 0 && ::chown(tmp.c_str(), st.st_uid, st.st_gid) != 0)
    input_error("{}: cannot give the new file the old one's owner ({})", path, std::strerror(errno));
}
// The bytes of `from` into the (empty) file `to`: in the kernel where it can (no copy through
// user space), else by the standard library.
void copy_file_bytes(const std::string& path, const std::string& from, const std::string& to,
                     const std::atomic<bool>& stop) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) input_error("{}: cannot read {} ({})", path, from, std::strerror(errno));
  const int out = ::open(to.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    input_error("{}: cannot write {} ({})", path, to, std::strerror(e));
  }
  struct stat st {};
  ::fstat(in, &st);
  std::uint64_t copied = 0, size = static_cast<std::uint64_t>(st.st_size);
  int err = 0;
  bool fallback = false;
  constexpr std::uint64_t kPiece = std::uint64_t{256} << 20;  // between pieces: stopped?
  while (copied < size && !stop) {
    const ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, std::min(size - copied, kPiece), 0);
    if (n > 0) {
      copied += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;  // a signal's handler ran (the copy goes on)
    if (n < 0 && copied == 0 && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP)) fallback = true;
    else err = n < 0 ? errno : EIO;  // 0 bytes before the end: the file shrank under us
    break;
  }
  ::close(in);
  if (::close(out) != 0 && !err) err = errno;
  if (fallback) {
    std::error_code ec;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) input_error("{}: cannot copy {} to {} ({})", path, from, to, ec.message());
  } else if (err) {
    input_error("{}: cannot copy {} to {} ({})", path, from, to, std::strerror(err));
  }
}
}  // namespace

H5Writer::H5Writer(const std::string& path, const std::string& copy_from, Copy copy) : impl_(new Impl) {
  quiet_hdf5();
  std::unique_ptr<Impl> guard(impl_);
  Impl& m = *impl_;
  m.path = path;
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) input_error("{}: folder '{}' does not exist", path, dir.string());
  refuse_read_only(path);
  remove_stale_temps(path);  // what an earlier tdiff killed by SIGKILL left beside it
  if (!copy_from.empty()) {
    m.source = copy_from;
    m.src = open_read(copy_from);
  }
  m.tmp = temp_name(path);
  m.reg = TempRegistration(m.tmp);
  create_temp_file(path, m.tmp);
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
  // The 1.8 file format: compact new-style headers, yet readable by every h5py and h5dump
  // still in use.
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
  if (m.src.ok() && copy == Copy::bytes) {
    m.src.reset();  // validated above; the copy is made of its bytes
    std::error_code ec;
    m.ensure_space(fs::file_size(copy_from, ec), "rewrite the case file");
    // Beside the caller's work (a run opens its record before the forward): HDF5 is not
    // touched on that thread, and the first change waits for it (check_open).
    Impl* impl = &m;
    m.copying = std::async(std::launch::async, [impl, path, copy_from] {
      copy_file_bytes(path, copy_from, impl->tmp, impl->stop_copy);
    });
    guard.release();
    return;
  }
  m.file = Hid(H5Fcreate(m.tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!m.file.ok()) input_error("{}: cannot create the temporary file {} ({})", path, m.tmp, h5_detail());
  if (m.src.ok()) {
    Hid root(H5Gopen2(m.src.get(), "/", H5P_DEFAULT));
    for (auto& name : child_names(root.get())) m.pending.insert(name);
    // The copy must fit: said now, before the caller's work (run computes, then records).
    std::uintmax_t copy = 0;
    for (const auto& name : m.pending) copy += storage_bytes(m.src.get(), name.c_str());
    m.ensure_space(copy, "rewrite the case file");
    Hid dst_root(H5Gopen2(m.file.get(), "/", H5P_DEFAULT));
    try {
      copy_attrs(root.get(), dst_root.get());
    } catch (const std::runtime_error& e) {
      input_error("{}: cannot copy the root attributes ({})", copy_from, e.what());
    }
  }
  guard.release();
}

H5Writer::~H5Writer() { delete impl_; }

void H5Writer::write(const std::string& path, const Tensor& t) {
  Impl& m = *impl_;
  m.check_open();
  const std::string p = norm_path(path);
  if (p == "/") throw std::logic_error("H5Writer::write: empty dataset path");
  auto parts = path_parts(p);
  if (parts.size() == 1) m.pending.erase(parts[0]);  // replaced whole: no need to copy
  else m.touch(p);
  hid_t f = m.file.get();
  if (path_exists(f, p) && H5Ldelete(f, p.c_str(), H5P_DEFAULT) < 0) m.fail(fmt::format("cannot replace '{}'", p));

  m.ensure_space(t.nbytes(), "write the new data");
  Storage s = storage_for(t.dtype());
  Hid space(t.rank() == 0 ? H5Screate(H5S_SCALAR)
                          : H5Screate_simple(t.rank(), std::vector<hsize_t>(t.shape().begin(), t.shape().end()).data(), nullptr));
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE));
  // Masks, ids and selections are compressed (they shrink many times over); float tensors
  // are not: shuffle + deflate saved 14% of a real-width reference and took 3/4 of golden's
  // time (one thread at about 40 MB/s).
  if (t.nbytes() > kChunkBytes && t.rank() > 0 && !is_float(t.dtype())) {
    auto chunk = chunk_dims(t.shape(), dtype_size(t.dtype()));
    H5Pset_chunk(dcpl.get(), t.rank(), chunk.data());
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), 1);
    }
  }
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid d(H5Dcreate2(f, p.c_str(), s.file_type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!d.ok()) m.fail(fmt::format("cannot create dataset '{}'", p));
  if (t.numel() > 0 && H5Dwrite(d.get(), s.mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    m.fail(fmt::format("cannot write dataset '{}'", p));
  if (s.tag) {
    try {
      write_string_attr(d.get(), "dtype", s.tag);
    } catch (const std::runtime_error&) {
      m.fail(fmt::format("cannot tag dataset '{}'", p));
    }
  }
}

void H5Writer::set_attr(const std::string& path, const std::string& name, const std::string& value) {
  Impl& m = *impl_;
  m.check_open();
  const std::string p = norm_path(path);
  m.touch(p);
  hid_t f = m.file.get();
  if (!path_exists(f, p)) {
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    Hid g(H5Gcreate2(f, p.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!g.ok()) m.fail(fmt::format("cannot create group '{}'", p));
  }
  Hid o(H5Oopen(f, p.c_str(), H5P_DEFAULT));
  if (!o.ok()) m.fail(fmt::format("cannot open '{}'", p));
  try {
    write_string_attr(o.get(), name, value);
  } catch (const std::runtime_error&) {
    m.fail(fmt::format("cannot write attribute '{}' of '{}'", name, p));
  }
}

void H5Writer::remove(const std::string& path) {
  Impl& m = *impl_;
  m.check_open();
  const std::string p = norm_path(path);
  if (p == "/") throw std::logic_error("H5Writer::remove: cannot remove the root group");
  auto parts = path_parts(p);
  if (parts.size() == 1) m.pending.erase(parts[0]);
  else m.touch(p);
  if (path_exists(m.file.get(), p) && H5Ldelete(m.file.get(), p.c_str(), H5P_DEFAULT) < 0)
    m.fail(fmt::format("cannot remove '{}'", p));
}

void H5Writer::remove_attr(const std::string& path, const std::string& name) {
  Impl& m = *impl_;
  m.check_open();
  const std::string p = norm_path(path);
  m.touch(p);
  if (!path_exists(m.file.get(), p)) return;
  Hid o(H5Oopen(m.file.get(), p.c_str(), H5P_DEFAULT));
  if (!o.ok()) m.fail(fmt::format("cannot open '{}'", p));
  if (H5Aexists(o.get(), name.c_str()) > 0 && H5Adelete(o.get(), name.c_str()) < 0)
    m.fail(fmt::format("cannot remove attribute '{}' of '{}'", name, p));
}

void H5Writer::commit() {
  Impl& m = *impl_;
  m.check_open();
  while (!m.pending.empty()) m.materialize(*m.pending.begin());
  m.src.reset();
  if (H5Fflush(m.file.get(), H5F_SCOPE_GLOBAL) < 0) m.fail("cannot flush the file");
  if (H5Fclose(m.file.release()) < 0) input_error("{}: cannot close the file ({})", m.path, h5_detail());
  // The data must be on disk before the rename makes it the real file.
  if (int fd = ::open(m.tmp.c_str(), O_RDONLY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  keep_permissions(m.path, m.tmp);
  std::error_code ec;
  fs::rename(m.tmp, m.path, ec);
  if (ec) input_error("{}: cannot rename {} onto it ({})", m.path, m.tmp, ec.message());
  m.committed = true;
  m.reg.reset();
}

}  // namespace tdiff
