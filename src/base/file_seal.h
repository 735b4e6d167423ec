#pragma once
// The integrity record ("seal") tdiff keeps in the first bytes of the HDF5 files it writes (the
// HDF5 user block, which HDF5, h5py and h5dump skip): checked before HDF5 parses anything, so a
// damaged file is one line and exit 2 rather than whatever libhdf5 does with broken metadata.
// The record is text, padded with NUL bytes to the block's size:
//   tdiff-seal 1                  magic line and the record's format
//   block=<bytes>                 the user block's size (where the HDF5 data starts)
//   size=<bytes>                  the whole file's size
//   quick=<sha256 hex>            the quick fingerprint (below)
//   sha256=<sha256 hex>           SHA-256 of the bytes after the block, in 64 MiB pieces (below)
// sha256 is the SHA-256 of the concatenated lowercase hex SHA-256s of the pieces [block,
// block + 64 MiB), [block + 64 MiB, ...), ...: the pieces are hashed on all threads, so sealing
// a 38 GB case after `run` is bound by the disk, not by one core (1.66 GB/s with SHA-NI).
// quick is the SHA-256 of the size, the first and last MiB after the block (HDF5's superblock,
// root group and the metadata written at close) and 16 blocks of 64 KiB at evenly spaced
// offsets: about 3 MiB read however large the file.
#include <cstdint>
#include <optional>
#include <string>

namespace tdiff {

inline constexpr const char* kSealMagic = "tdiff-seal 1\n";
inline constexpr std::uint64_t kSealBlock = 512;  // the smallest user block HDF5 allows

struct SealRecord {
  std::uint64_t block = kSealBlock, size = 0;
  std::string quick, sha256;
};

// The record as the block's bytes (exactly r.block bytes).
std::string format_seal(const SealRecord& r);

// What the first bytes of a file say about its seal.
struct SealRead {
  bool sealed = false;  // the file starts with a record (or the remains of one)
  std::string damage;   // non-empty: the record itself is damaged (says how)
  SealRecord record;
};
// Reads the record of `path`. A file is taken as sealed when it starts with the magic line or,
// HDF5's signature not being at offset 0, its first block holds one of the record's keys (one
// flipped byte of the magic must not make a sealed file look unsealed). InputError when the file
// cannot be read.
SealRead read_seal(const std::string& path);

// The record of `path` as it is now, for a user block of `block` bytes (the block's own bytes
// are not hashed). `full` false: the SHA-256 is left empty (quick fingerprint only).
SealRecord compute_seal(const std::string& path, std::uint64_t block, bool full = true);

// Writes the current record of `path` into its first `block` bytes (the HDF5 file must be
// closed). InputError naming `shown` when it cannot.
void write_seal(const std::string& path, std::uint64_t block, const std::string& shown);

// Checks `path` against its record: "" when it matches, else what differs ("its SHA-256 differs
// from the record"). `full` false: the size and the quick fingerprint only. std::nullopt: the
// file carries no record.
struct SealCheck {
  std::string damage;
  bool hashed = false;  // the whole file was hashed
};
std::optional<SealCheck> check_seal(const std::string& path, bool full);

}  // namespace tdiff
