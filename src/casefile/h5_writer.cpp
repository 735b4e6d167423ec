#include "casefile/h5_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/file_seal.h"
#include "casefile/h5_common.h"

namespace tdiff {

using namespace h5;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // compress datasets above 1 MiB

// Bytes the datasets under `name` (relative to loc) occupy in their file: what copying the
// object into another file writes, give or take its headers (H5Ocopy copies an object reached
// twice once). As the reader's listing: bounded depth, each group once (a crafted file can
// link a group into itself).
std::uintmax_t storage_bytes(hid_t loc, const char* name, const std::string& file, std::set<std::string>& seen,
                             int depth = 0) {
  constexpr int kMaxDepth = 32;
  if (depth > kMaxDepth) input_error("{}: groups nest more than {} deep under '{}', the file is damaged", file, kMaxDepth, name);
  Hid obj(H5Oopen(loc, name, H5P_DEFAULT));
  if (!obj.ok() || !seen.insert(object_key(obj.get())).second) return 0;
  switch (H5Iget_type(obj.get())) {
    case H5I_DATASET: return H5Dget_storage_size(obj.get());
    case H5I_GROUP: {
      std::uintmax_t sum = 0;
      for (const auto& child : child_names(obj.get(), file, name))
        sum += storage_bytes(obj.get(), child.c_str(), file, seen, depth + 1);
      return sum;
    }
    default: return 0;
  }
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

// Copies every attribute of the root group `from` to `to` in its own type (the root group
// cannot be copied with H5Ocopy).
void copy_attrs(hid_t from, hid_t to, const std::string& file) {
  const std::vector<std::string> names = attribute_names(from, file, "/");
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

// The size of the user block of an open file (0: none).
hsize_t user_block(hid_t file) {
  Hid fcpl(H5Fget_create_plist(file));
  hsize_t size = 0;
  if (!fcpl.ok() || H5Pget_userblock(fcpl.get(), &size) < 0) return 0;
  return size;
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

// Updates start from a copy of `copy_from`, made lazily per top-level object: replacing a
// whole top-level group (say /reference) never copies the old one, so a case file that is
// updated many times does not accumulate the dead space HDF5 leaves behind deleted objects.
struct H5Writer::Impl {
  std::string path, tmp, source;  // tmp: out's temporary, which HDF5 opens by name
  std::optional<AtomicFile> out;  // destroyed after `file`: an unfinished temporary is removed
  Hid file, src;
  std::set<std::string> pending;  // top-level names of `src` not copied yet
  bool committed = false;
  std::future<void> copying;       // Copy::bytes: the byte copy into `tmp`, on its own thread
  std::atomic<bool> stop_copy{false};

  // Also when the constructor fails: HDF5 lets go of the temporary before `out` removes it.
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
    std::set<std::string> seen;
    ensure_space(storage_bytes(src.get(), top.c_str(), source, seen), "rewrite the case file");
    if (H5Ocopy(src.get(), top.c_str(), file.get(), top.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
      input_error("{}: cannot copy '/{}' from {} ({})", path, top, source, h5_detail());
  }
  void touch(const std::string& p) {
    auto parts = path_parts(p);
    if (!parts.empty()) materialize(parts[0]);
  }
};

H5Writer::H5Writer(const std::string& path, const std::string& copy_from, Copy copy) : impl_(new Impl) {
  quiet_hdf5();
  std::unique_ptr<Impl> guard(impl_);
  Impl& m = *impl_;
  m.path = path;
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) input_error("{}: folder '{}' does not exist", path, dir.string());
  refuse_read_only(path);
  if (!copy_from.empty()) {
    m.source = copy_from;
    m.src = open_read(copy_from);
  }
  m.out.emplace(path);
  m.tmp = m.out->temp_path();
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
  // The 1.8 file format: compact new-style headers, yet readable by every h5py and h5dump
  // still in use.
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
  // A byte copy keeps the source's user block, where the integrity record goes: a source
  // without one (written before the record existed, or by another tool) is copied object by
  // object into a new file that has one.
  if (m.src.ok() && copy == Copy::bytes && user_block(m.src.get()) == kSealBlock) {
    m.src.reset();  // validated above; the copy is made of its bytes
    std::error_code ec;
    m.ensure_space(fs::file_size(copy_from, ec), "rewrite the case file");
    // Beside the caller's work (a run opens its record before the forward): HDF5 is not
    // touched on that thread, and the first change waits for it (check_open).
    Impl* impl = &m;
    m.copying = std::async(std::launch::async, [impl, path, copy_from] {
      copy_file_bytes(path, copy_from, impl->tmp, impl->stop_copy);
      if (!impl->stop_copy) check_copy_of_case(copy_from, impl->tmp);  // before commit seals these bytes anew
    });
    guard.release();
    return;
  }
  Hid fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_userblock(fcpl.get(), kSealBlock);  // the integrity record's place (base/file_seal.h)
  m.file = Hid(H5Fcreate(m.tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!m.file.ok()) input_error("{}: cannot create the temporary file {} ({})", path, m.tmp, h5_detail());
  if (m.src.ok()) {
    Hid root(H5Gopen2(m.src.get(), "/", H5P_DEFAULT));
    for (auto& name : child_names(root.get(), copy_from, "/")) m.pending.insert(name);
    // The copy must fit: said now, before the caller's work (run computes, then records).
    std::uintmax_t copy = 0;
    std::set<std::string> seen;
    for (const auto& name : m.pending) copy += storage_bytes(m.src.get(), name.c_str(), copy_from, seen);
    m.ensure_space(copy, "rewrite the case file");
    Hid dst_root(H5Gopen2(m.file.get(), "/", H5P_DEFAULT));
    try {
      copy_attrs(root.get(), dst_root.get(), copy_from);
    } catch (const InputError&) {
      throw;
    } catch (const std::runtime_error& e) {
      input_error("{}: cannot copy the root attributes ({})", copy_from, e.what());
    }
  }
  guard.release();
}

H5Writer::~H5Writer() { delete impl_; }

void H5Writer::check_update(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) input_error("{}: folder '{}' does not exist", path, dir.string());
  refuse_read_only(path);
  open_read(path);
  AtomicFile probe(path);  // a temporary can be created beside it; removed again here
  Impl m;
  m.path = path;
  m.tmp = probe.temp_path();
  m.ensure_space(fs::file_size(path, ec), "rewrite the case file");
}

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
  // After HDF5 wrote its last byte, before the rename: the record covers the file as renamed.
  write_seal(m.tmp, kSealBlock, m.path);
  m.out->commit();
  m.committed = true;
}

}  // namespace tdiff
