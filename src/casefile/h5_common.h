#pragma once
// What the HDF5 reader (h5_reader.h) and writer (h5_writer.h) share: identifiers that close
// themselves, one-line error messages, dataset paths, and the mapping of tdiff dtypes to HDF5
// types.
//
// Storage of tdiff dtypes (every file type little-endian, readable by h5py and h5dump):
//   f64, f32        IEEE float
//   f16             IEEE half built with H5Tset_fields (h5py reads it as float16)
//   bf16            uint16 bit patterns + attribute dtype="bf16" (HDF5 has no bf16 type)
//   f8_e4m3         uint8 bit patterns  + attribute dtype="f8_e4m3" (no inf; HDF5's float
//                   conversions would not respect the "fn" NaN encoding)
//   i64, i32, u8    integers
//   boolean         uint8 0/1           + attribute dtype="bool" (h5py's enum bools are read too)
// Attributes written here are scalar fixed-length UTF-8 strings (h5py reads them as str).
#include <string>
#include <utility>
#include <vector>

#include <hdf5.h>

#include "base/tensor.h"

namespace tdiff::h5 {

// HDF5 prints its whole error stack to stderr by default; tdiff reports one line instead.
void quiet_hdf5();

// The innermost message of the current HDF5 error stack ("truncated file: eof = ...").
// Must be called right after the failing call: every API call clears the stack.
std::string h5_detail();

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
std::string norm_path(const std::string& p);
// "/x/y" -> {"x", "y"}.
std::vector<std::string> path_parts(const std::string& p);
// True when every component of `path` exists (H5Lexists needs the parents to exist).
bool path_exists(hid_t loc, const std::string& path);

// Opens an existing HDF5 file for reading; an InputError says what is wrong with it. A file
// that carries tdiff's integrity record (base/file_seal.h) is checked against it first.
Hid open_read(const std::string& file);

// How a file's integrity record is checked before HDF5 reads it. automatic: the whole file is
// hashed when it is at most kFullCheckBytes, else quick (size, first and last MiB, 16 samples);
// TDIFF_VERIFY_CASE=quick|full in the environment, or set_case_check (--verify-case), chooses
// for every file. off: not checked (tdiff case seal, which reads a file to record it anew).
enum class CaseCheck { automatic, quick, full, off };
// 1 GiB: hashing it whole takes about 0.65 s on one core with SHA-NI (1.66 GB/s measured on
// the 2-core EPYC VM; half that on two cores), once per process and file; a real-width case
// (38 GB) would take half a minute, so it gets the quick check unless asked.
inline constexpr std::uint64_t kFullCheckBytes = std::uint64_t{1} << 30;
void set_case_check(CaseCheck c);
CaseCheck case_check();
// InputError "<file>: the case file is damaged: <why>; ..." when `file` carries a record that
// does not match it. A file is checked once per process while its size, times and inode stay
// the same.
void check_case_file(const std::string& file);
// The whole-file check of a byte copy of a case that is about to be changed and sealed anew
// (H5Writer's byte-copy update): the new record would otherwise certify whatever damage the
// quick check did not see. Nothing when `source` as it is now was already hashed whole in this
// process, when the check is off, or when it carries no record. InputError as
// check_case_file's, naming `source`.
void check_copy_of_case(const std::string& source, const std::string& copy);
// Forgets which files were checked (a fuzz target rewrites one file in place, within the
// file system's time resolution).
void forget_checked_files();

// More links or attributes than any file tdiff reads holds (a real-width case has about 2,000
// stages); a larger count is damage, refused before anything is allocated for it.
inline constexpr hsize_t kMaxLinks = hsize_t{1} << 20;
// Children names of a group, sorted by name. InputError naming `file` when the group's links
// cannot be read (a damaged file); `path` names the group in the message.
std::vector<std::string> child_names(hid_t group, const std::string& file, const std::string& path);
// Attribute names of an object, sorted by name (InputError as child_names).
std::vector<std::string> attribute_names(hid_t obj, const std::string& file, const std::string& path);

// Where an object lives in its file: two paths reaching one group (a hard link, or a group
// linked into itself by a crafted file) give the same key, so a walk visits each group once.
std::string object_key(hid_t obj);

// IEEE binary16 (HDF5 has no predefined type for it).
Hid make_f16_type();

// File and memory types of a dtype, and the dtype attribute it needs (if any).
struct Storage {
  Hid file_type, mem_type;
  const char* tag = nullptr;
};

Storage storage_for(DType t);

// The dtype a dataset reads as, and the memory type that reads it (HDF5 converts other
// integer and float widths to i64 / f64).
std::pair<DType, Hid> read_type(hid_t ftype, const std::string& tag, const std::string& file, const std::string& path);

}  // namespace tdiff::h5
