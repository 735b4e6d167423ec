#include "casefile/h5_common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "base/error.h"
#include "base/file_seal.h"

namespace tdiff::h5 {

namespace fs = std::filesystem;

void quiet_hdf5() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

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

bool path_exists(hid_t loc, const std::string& path) {
  std::string sofar;
  for (const auto& part : path_parts(path)) {
    sofar += "/" + part;
    if (H5Lexists(loc, sofar.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

namespace {

std::mutex checked_mutex;
using FileVersion = std::tuple<dev_t, ino_t, off_t, std::int64_t, std::int64_t>;
std::set<FileVersion> checked;  // what check_case_file passed
std::set<FileVersion> hashed;   // ... of those, hashed whole
std::optional<CaseCheck> check_override;

CaseCheck mode_from_environment() {
  const char* v = std::getenv("TDIFF_VERIFY_CASE");
  if (!v || !*v) return CaseCheck::automatic;
  const std::string s = v;
  if (s == "quick") return CaseCheck::quick;
  if (s == "full") return CaseCheck::full;
  input_error("TDIFF_VERIFY_CASE={}: expected quick or full", s);
}

std::int64_t ns(const timespec& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

}  // namespace

void set_case_check(CaseCheck c) {
  std::lock_guard lock(checked_mutex);
  check_override = c;
  checked.clear();  // a stricter check than before reads again
  hashed.clear();
}

CaseCheck case_check() {
  {
    std::lock_guard lock(checked_mutex);
    if (check_override) return *check_override;
  }
  return mode_from_environment();
}

void forget_checked_files() {
  std::lock_guard lock(checked_mutex);
  checked.clear();
  hashed.clear();
}

void check_case_file(const std::string& file) {
  const CaseCheck mode = case_check();
  if (mode == CaseCheck::off) return;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return;  // open_read says why
  const FileVersion key = std::make_tuple(st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim));
  {
    std::lock_guard lock(checked_mutex);
    if (checked.count(key)) return;
  }
  const bool full = mode == CaseCheck::full ||
                    (mode == CaseCheck::automatic && static_cast<std::uint64_t>(st.st_size) <= kFullCheckBytes);
  const auto c = check_seal(file, full);
  if (c && !c->damage.empty())
    input_error("{}: the case file is damaged: {}; if it was edited on purpose, `tdiff case seal {}` records its new "
                "checksum", file, c->damage, file);
  std::lock_guard lock(checked_mutex);
  checked.insert(key);
  if (c && c->hashed) hashed.insert(key);
}

void check_copy_of_case(const std::string& source, const std::string& copy) {
  if (case_check() == CaseCheck::off) return;
  struct stat st {};
  if (::stat(source.c_str(), &st) == 0) {
    std::lock_guard lock(checked_mutex);
    if (hashed.count(std::make_tuple(st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)))) return;
  }
  const auto c = check_seal(copy, true);
  if (c && !c->damage.empty())
    input_error("{}: the case file is damaged: {}; if it was edited on purpose, `tdiff case seal {}` records its new "
                "checksum", source, c->damage, source);
}

Hid open_read(const std::string& file) {
  quiet_hdf5();
  std::error_code ec;
  if (!fs::exists(file, ec)) input_error("{}: no such file", file);
  if (fs::is_directory(file, ec)) input_error("{}: is a folder, not an HDF5 file", file);
  // HDF5 says "not an HDF5 file" for a file it may not open; say what is wrong instead.
  if (::access(file.c_str(), R_OK) != 0) input_error("{}: cannot read the file ({})", file, std::strerror(errno));
  // Before HDF5 parses a byte: libhdf5 1.10 aborts on some damaged metadata.
  check_case_file(file);
  if (H5Fis_hdf5(file.c_str()) <= 0) input_error("{}: not an HDF5 file", file);
  Hid f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.ok()) input_error("{}: cannot open the HDF5 file, it is truncated or damaged ({})", file, h5_detail());
  return f;
}

namespace {
bool float_layout(hid_t t, std::size_t spos, std::size_t epos, std::size_t esize, std::size_t msize, std::size_t bias) {
  std::size_t s, e, es, m, ms;
  if (H5Tget_fields(t, &s, &e, &es, &m, &ms) < 0) return false;
  return s == spos && e == epos && es == esize && m == 0 && ms == msize && H5Tget_ebias(t) == bias;
}
}  // namespace

std::string object_key(hid_t obj) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info{};
  if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return {};
  return std::to_string(info.fileno) + ":" + std::string(reinterpret_cast<const char*>(&info.token), sizeof info.token);
#else
  H5O_info_t info{};
  if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return {};
  return std::to_string(info.fileno) + ":" + std::to_string(info.addr);
#endif
}

Hid make_f16_type() {
  Hid t(H5Tcopy(H5T_IEEE_F32LE));
  // sign bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15: IEEE binary16.
  if (H5Tset_fields(t.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(t.get(), 2) < 0 || H5Tset_ebias(t.get(), 15) < 0)
    throw std::runtime_error("HDF5: cannot build the float16 type");
  return t;
}

namespace {

// Names seen by an iteration, stopped with an error past `limit` (a damaged count).
struct NameList {
  std::vector<std::string> names;
  hsize_t limit = 0;
};

herr_t add_name(const char* name, NameList& list) {
  if (list.names.size() >= list.limit) return -1;
  list.names.push_back(name);
  return 0;
}

}  // namespace

// In the B-tree's own order (H5_ITER_NATIVE), then sorted here. Name order (H5_ITER_INC) makes
// libhdf5 1.10 copy the links of a group in dense storage into a table sized by the count in the
// fractal heap's header: when damage makes that count disagree with the B-tree, the copy writes
// past the table or frees entries it never filled ("double free or corruption", an abort in
// H5G__dense_iterate; 8 of 1,020 single-byte flips of a tiny case in fuzz/flip_sweep.py). The
// native order walks the B-tree and decodes one link at a time.
std::vector<std::string> child_names(hid_t group, const std::string& file, const std::string& path) {
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0)
    input_error("{}: the links of group '{}' cannot be read, the file is damaged ({})", file, path, h5_detail());
  if (info.nlinks > kMaxLinks)
    input_error("{}: group '{}' declares {} links (more than {}), the file is damaged", file, path, info.nlinks, kMaxLinks);
  NameList list;
  list.limit = info.nlinks;
  hsize_t idx = 0;
  const herr_t rc = H5Literate(
      group, H5_INDEX_NAME, H5_ITER_NATIVE, &idx,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        return add_name(name, *static_cast<NameList*>(data));
      },
      &list);
  if (rc < 0 || list.names.size() != info.nlinks)
    input_error("{}: the links of group '{}' cannot be read, the file is damaged ({} of {} links{})", file, path,
                list.names.size(), info.nlinks, rc < 0 ? ": " + h5_detail() : "");
  std::sort(list.names.begin(), list.names.end());
  return list.names;
}

// The same for attributes: name order builds a table sized by the attribute info's count
// (H5A__dense_build_table), the native order does not.
std::vector<std::string> attribute_names(hid_t obj, const std::string& file, const std::string& path) {
  H5O_info_t info{};
  if (H5Oget_info2(obj, &info, H5O_INFO_NUM_ATTRS) < 0)
    input_error("{}: the attributes of '{}' cannot be read, the file is damaged ({})", file, path, h5_detail());
  if (info.num_attrs > kMaxLinks)
    input_error("{}: '{}' declares {} attributes (more than {}), the file is damaged", file, path, info.num_attrs,
                kMaxLinks);
  NameList list;
  list.limit = info.num_attrs;
  hsize_t idx = 0;
  const herr_t rc = H5Aiterate2(
      obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        return add_name(name, *static_cast<NameList*>(data));
      },
      &list);
  if (rc < 0 || list.names.size() != info.num_attrs)
    input_error("{}: the attributes of '{}' cannot be read, the file is damaged ({} of {} attributes{})", file, path,
                list.names.size(), info.num_attrs, rc < 0 ? ": " + h5_detail() : "");
  std::sort(list.names.begin(), list.names.end());
  return list.names;
}

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

}  // namespace tdiff::h5
