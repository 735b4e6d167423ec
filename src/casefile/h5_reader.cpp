#include "casefile/h5_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "casefile/h5_common.h"

namespace tdiff {

using namespace h5;

namespace {

// Opens a group or dataset; `what` words the error ("dataset", "group", "object").
Hid open_object(hid_t f, const std::string& file, const std::string& path, const char* what) {
  const std::string p = norm_path(path);
  if (!path_exists(f, p)) input_error("{}: {} '{}' is missing", file, what, p);
  Hid o(H5Oopen(f, p.c_str(), H5P_DEFAULT));
  if (!o.ok()) input_error("{}: cannot open '{}' ({})", file, p, h5_detail());
  return o;
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

std::map<std::string, std::string> read_attrs(hid_t obj, const std::string& file, const std::string& path) {
  const std::vector<std::string> names = attribute_names(obj, file, path);
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

// `depth`: groups nest at most kMaxDepth deep, and each group is walked once (`seen`): a
// damaged or crafted file can link a group into itself, once or many times.
void collect_datasets(hid_t group, const std::string& file, const std::string& prefix, std::vector<std::string>& out,
                      std::set<std::string>& seen, int depth = 0) {
  constexpr int kMaxDepth = 32;
  if (depth > kMaxDepth) input_error("{}: groups nest more than {} deep under '{}', the file is damaged", file, kMaxDepth, prefix);
  if (!seen.insert(object_key(group)).second) return;
  for (const auto& name : child_names(group, file, prefix)) {
    Hid o(H5Oopen(group, name.c_str(), H5P_DEFAULT));
    if (!o.ok()) continue;  // dangling soft or external link
    const std::string full = prefix == "/" ? "/" + name : prefix + "/" + name;
    const H5I_type_t kind = H5Iget_type(o.get());
    if (kind == H5I_DATASET) out.push_back(full);
    else if (kind == H5I_GROUP) collect_datasets(o.get(), file, full, out, seen, depth + 1);
  }
}

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
  for (hsize_t d : dims) {
    if (!shape.empty()) shape += ',';
    shape += std::to_string(d);
  }
  if (bytes > kMax)
    input_error("{}: dataset '{}' declares shape [{}], too many bytes to address", file, path, shape);
  if (memory > 0 && bytes > memory)
    input_error("{}: dataset '{}' declares shape [{}], {:.3g} GB, more than this machine's memory ({:.3g} GB)", file,
                path, shape, static_cast<double>(bytes) / 1e9, static_cast<double>(memory) / 1e9);
}

// A dataset opened for reading: its dtype, the memory type that reads it and its dimensions
// (what h5_read and h5_dataset_info both need; the caller's H5File keeps `file` open).
struct OpenDataset {
  hid_t file = -1;
  Hid dataset, mem_type;
  DType dtype;
  std::vector<hsize_t> dims;
  std::string path;  // normalised, for messages
};

OpenDataset open_dataset(hid_t f, const std::string& file, const std::string& path) {
  OpenDataset o;
  o.file = f;
  o.path = norm_path(path);
  o.dataset = open_object(f, file, o.path, "dataset");
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
  Hid fapl(H5Fget_access_plist(d.file));
  void* handle = nullptr;
  if (H5Pget_driver(fapl.get()) != H5FD_SEC2 || H5Fget_vfd_handle(d.file, fapl.get(), &handle) < 0 || !handle)
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

std::vector<std::string> h5_list_datasets(const std::string& file, const std::string& group) {
  Hid f = open_read(file);
  Hid g = open_object(f.get(), file, group, "group");
  if (H5Iget_type(g.get()) != H5I_GROUP) input_error("{}: '{}' is not a group", file, norm_path(group));
  std::vector<std::string> out;
  std::set<std::string> seen;
  collect_datasets(g.get(), file, norm_path(group), out, seen);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> h5_list_children(const std::string& file, const std::string& group) {
  Hid f = open_read(file);
  Hid g = open_object(f.get(), file, group, "group");
  if (H5Iget_type(g.get()) != H5I_GROUP) input_error("{}: '{}' is not a group", file, norm_path(group));
  return child_names(g.get(), file, norm_path(group));
}

std::vector<std::string> h5_list_children(const H5File& file, const std::string& group) {
  Hid g = open_object(file.id(), file.path(), group, "group");
  if (H5Iget_type(g.get()) != H5I_GROUP) input_error("{}: '{}' is not a group", file.path(), norm_path(group));
  return child_names(g.get(), file.path(), norm_path(group));
}

H5File::H5File(const std::string& path) : path_(path), handle_(std::make_shared<const Hid>(open_read(path))) {}

std::int64_t H5File::id() const { return handle_->get(); }

bool h5_exists(const std::string& file, const std::string& path) { return h5_exists(H5File(file), path); }

bool h5_exists(const H5File& file, const std::string& path) { return path_exists(file.id(), path); }

Tensor h5_read(const std::string& file, const std::string& path) { return h5_read(H5File(file), path); }

Tensor h5_read(const H5File& f, const std::string& path) {
  const std::string& file = f.path();
  const OpenDataset d = open_dataset(f.id(), file, path);
  check_dataset_size(d.dims, dtype_size(d.dtype), file, d.path);
  Tensor t(d.dtype, Shape(d.dims.begin(), d.dims.end()));
  if (read_contiguous(d, file, t)) return t;
  if (t.numel() > 0 && H5Dread(d.dataset.get(), d.mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    input_error("{}: dataset '{}' cannot be read, the file is truncated or damaged ({})", file, d.path, h5_detail());
  return t;
}

H5DatasetInfo h5_dataset_info(const std::string& file, const std::string& path) {
  return h5_dataset_info(H5File(file), path);
}

H5DatasetInfo h5_dataset_info(const H5File& file, const std::string& path) {
  const OpenDataset d = open_dataset(file.id(), file.path(), path);
  Hid type(H5Dget_type(d.dataset.get()));
  const bool u16 = type.get() >= 0 && H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 2 &&
                   H5Tget_sign(type.get()) == H5T_SGN_NONE;
  return {d.dtype, Shape(d.dims.begin(), d.dims.end()), u16 && dtype_attr(d.dataset.get()).empty()};
}

std::map<std::string, std::string> h5_read_attrs(const std::string& file, const std::string& path) {
  return h5_read_attrs(H5File(file), path);
}

std::map<std::string, std::string> h5_read_attrs(const H5File& file, const std::string& path) {
  Hid o = open_object(file.id(), file.path(), path, "object");
  try {
    return read_attrs(o.get(), file.path(), norm_path(path));
  } catch (const InputError&) {
    throw;  // already one line naming the file
  } catch (const std::runtime_error& e) {
    input_error("{}: attributes of '{}' cannot be read ({})", file.path(), norm_path(path), e.what());
  }
}

}  // namespace tdiff
