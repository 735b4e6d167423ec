#pragma once
// Is the model folder still the one a case was made from? A case records, for every weight
// file, its SHA-256 ("sha256:<file>") and, since this change, a cheap identity
// ("stat:<file>" = "size=<bytes> mtime_ns=<ns> fingerprint=<hex>"). golden and run check it
// before they read any weight:
//   quick (default): size and fingerprint must match; when the modification time differs too
//     (the file was rewritten or copied), the whole file is hashed and compared with the
//     SHA-256. A file whose size, time and fingerprint match is taken as unchanged: about
//     1 MiB read per file, however large. A case without "stat:" records (made by an older
//     tdiff) gets the full hash.
//   full: every file is hashed whole (minutes for hundreds of GB), whatever the folder's
//     checksum cache (formats/checksum_cache.h) says.
// Either way, the files hashed whole are put into that cache, for the next `case new`.
// The fingerprint is the SHA-256 of the file size, the safetensors header (8-byte length and
// JSON, up to 64 MiB) and 16 blocks of 64 KiB at evenly spaced offsets: a file whose tensors
// were replaced with others of the same shapes (same header) differs in the samples unless the
// edit misses all 16 blocks; such an edit also changes the modification time unless it was
// forged, which the full check catches.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tdiff {

// "size=<bytes> mtime_ns=<ns> fingerprint=<hex>" of a file (InputError naming it if unreadable).
std::string weight_file_stat(const std::string& path);

struct WeightCheck {
  std::vector<std::string> changed;              // "<file>: why", in file-name order
  std::map<std::string, std::string> refreshed;  // file name -> current stat record, for files whose
                                                 // time moved but whose SHA-256 still matches
  std::size_t files = 0;                         // files checked
  std::size_t hashed_files = 0;                  // files read whole
  std::uintmax_t hashed_bytes = 0;
  double seconds = 0;
  bool recorded = true;  // false: the case records no checksums (nothing to compare)
  std::string cache_note;  // why the checksum cache could not be written ("" when it was or had nothing new)
};

// `files`: the model folder's weight files now (paths); `sha256`, `stats`: what the case
// records, by file name.
WeightCheck check_weight_files(const std::vector<std::string>& files, const std::map<std::string, std::string>& sha256,
                               const std::map<std::string, std::string>& stats, bool full);

}  // namespace tdiff
