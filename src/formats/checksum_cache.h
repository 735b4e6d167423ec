#pragma once
// Checksums once. `case new` records the SHA-256 of every weight file; on a release of 160 GB
// that is minutes of reading per case. The folder's checksum cache keeps, per weight file, its
// name, size, modification time (ns), inode and SHA-256, so a later case of the same
// checkpoint takes the SHA-256 of a file whose size, time and inode are unchanged from the
// cache instead of reading it again.
//
// Where it lives: ".tdiff-checksums.json" in the model folder (it moves with the folder; a
// copy gets new inodes, so its entries no longer match and the files are hashed again); when
// that cannot be written (a read-only folder), "$XDG_CACHE_HOME/tdiff/checksums-<16 hex of the
// SHA-256 of the folder's absolute path>.json" (default ~/.cache/tdiff). Both are read, either
// may vouch. A file is written whole (a temporary renamed into place), so two commands saving
// at once leave one of their versions, never a mixture; the other's new entries are hashed
// again next time. A cache that cannot be read or parsed is ignored (and rewritten); one
// that cannot be written is a note, never an error.
//
// What the cache cannot see, like --verify-weights quick, is an edit that keeps the size and
// puts the modification time back: `case new --rehash` (and `--verify-weights full` of run,
// golden, bisect) hash every file whole whatever the cache says.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tdiff {

// What says a file is unchanged without reading it (stat(2), following symbolic links: a
// folder of links to blobs is vouched for by the blobs).
struct FileIdentity {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};

// InputError naming the file when it cannot be stat'ed.
FileIdentity file_identity(const std::string& path);

// The cache of one folder (the weight files directly in it, by file name).
class ChecksumCache {
 public:
  // Reads both places; what is missing, unreadable or malformed there counts as empty.
  explicit ChecksumCache(const std::string& folder);
  // The SHA-256 recorded for `name` with this identity, if either place has it.
  std::optional<std::string> find(const std::string& name, const FileIdentity& id) const;
  void put(const std::string& name, const FileIdentity& id, const std::string& sha256);
  // Writes the entries if put() changed any: the folder's file, else the user's. Returns ""
  // when written (or nothing changed), else one line saying why neither could be.
  std::string save();
  const std::string& folder_file() const { return folder_file_; }
  const std::string& user_file() const { return user_file_; }  // "" when there is no user cache folder

  struct Entry {
    FileIdentity id;
    std::string sha256;
  };
  using Entries = std::map<std::string, Entry>;

 private:
  std::string folder_, folder_file_, user_file_;
  Entries in_folder_, in_user_;
  bool changed_ = false;
};

// "$XDG_CACHE_HOME/tdiff" (an absolute XDG_CACHE_HOME), else "$HOME/.cache/tdiff"; "" with neither.
std::string user_cache_dir();

// One file hashed whole, with what the cache needs to vouch for it later.
struct FileHash {
  std::string sha256;
  FileIdentity id;  // taken before the hash
  // The identity was the same after the hash, and the file was last modified more than 2 s
  // before the hash began. A file written within the same tick of a coarse file-system clock
  // as the hash could change again without its time moving; such a file is not cached (and is
  // hashed again next time, by when it is old enough).
  bool cacheable = false;
};

class HashMeter;
FileHash hash_file(const std::string& path, HashMeter* meter = nullptr);

// Puts the cacheable hashes of files (paths) into their folders' caches and saves them; returns
// the notes of the caches that could not be written ("" when none). For hashes computed
// elsewhere (the weight check of golden and run), so that a later `case new` finds them.
std::string cache_hashes(const std::vector<std::pair<std::string, FileHash>>& hashed);

// Progress of hashing on stderr, shared by the hashing threads (thread-safe): "checksums:
// hashing 12.3 of 160.0 GB (3 of 163 files done)". Nothing during the first 2 s (a small
// model's hash stays quiet); then rewritten in place every 0.5 s on a terminal, a line every
// 10 s otherwise (logs stay short).
class HashMeter {
 public:
  explicit HashMeter(std::uintmax_t total_bytes = 0, std::size_t total_files = 0);
  ~HashMeter();
  HashMeter(const HashMeter&) = delete;
  HashMeter& operator=(const HashMeter&) = delete;
  void add_file(std::uintmax_t bytes);  // one more file to hash (when not known up front)
  void read(std::size_t bytes);         // bytes hashed
  void file_done();
  // The line shown: "checksums: hashing 12.3 of 160.0 GB (3 of 163 files done)".
  static std::string line(std::uintmax_t done, std::uintmax_t total, std::size_t files_done, std::size_t files);

 private:
  struct State;
  std::unique_ptr<State> s_;
  void maybe_show();
};

struct ChecksumOptions {
  bool rehash = false;  // hash every file whole; the cache is not read, only refreshed
};

// What weight_checksums did, for the line `case new` prints.
struct ChecksumReport {
  std::size_t files = 0, hashed = 0, cached = 0;
  std::size_t recent = 0;  // hashed but not cacheable (FileHash::cacheable): modified just before or while hashed
  std::uintmax_t hashed_bytes = 0;
  double seconds = 0;
  std::string note;  // why a cache could not be written ("" when none)
  // "checksums: 0 of 3 files hashed (3 from the cache)", "checksums: 3 of 3 files hashed (0
  // from the cache; 160.2 GB in 412.0 s)", "...; 1 modified within 2 s of its hash, not cached)".
  std::string summary() const;
};

// The SHA-256 of each of `files` (paths), in their order: from the cache of their folder where
// it vouches for the file (unless o.rehash), else hashed whole (on all threads, with a
// HashMeter) and put into the cache, which is then saved.
std::vector<std::string> weight_checksums(const std::vector<std::string>& files, const ChecksumOptions& o = {},
                                          ChecksumReport* report = nullptr);

}  // namespace tdiff
