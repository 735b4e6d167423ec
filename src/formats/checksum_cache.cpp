#include "formats/checksum_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/parallel_errors.h"
#include "base/sha256.h"

namespace tdiff {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "tdiff-checksums";
constexpr int kVersion = 1;
constexpr const char* kFolderFile = ".tdiff-checksums.json";
// A file modified less than this before its hash began is not cached (FileHash::cacheable):
// more than the coarsest common file-system clock (FAT's 2 s; ext4 and xfs tick in ms).
constexpr std::int64_t kRacyNs = std::int64_t{2} * 1000000000;
constexpr std::uintmax_t kMaxCacheBytes = std::uintmax_t{64} << 20;  // a cache file larger than this is not read

std::int64_t wall_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::optional<FileIdentity> identity_of(const std::string& path, int* err = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (err) *err = errno;
    return std::nullopt;
  }
  FileIdentity id;
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  return id;
}

std::string folder_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

std::string absolute_folder(const std::string& folder) {
  std::error_code ec;
  fs::path abs = fs::absolute(folder, ec);
  if (ec) return folder;
  fs::path canon = fs::weakly_canonical(abs, ec);
  return ec ? abs.string() : canon.string();
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// One entry of the "files" object; nullopt when any field is missing or of the wrong kind.
std::optional<ChecksumCache::Entry> parse_entry(const json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto size = v.find("size"), mtime = v.find("mtime_ns"), inode = v.find("inode"), sha = v.find("sha256");
  if (size == v.end() || mtime == v.end() || inode == v.end() || sha == v.end()) return std::nullopt;
  if (!size->is_number_unsigned() || !mtime->is_number_integer() || !inode->is_number_unsigned() || !sha->is_string())
    return std::nullopt;
  ChecksumCache::Entry e;
  e.id.size = size->get<std::uint64_t>();
  e.id.mtime_ns = mtime->get<std::int64_t>();
  e.id.inode = inode->get<std::uint64_t>();
  e.sha256 = sha->get<std::string>();
  if (!is_sha256_hex(e.sha256)) return std::nullopt;
  return e;
}

// The entries of a cache file; empty when it is missing, unreadable, too large, not JSON, of
// another format or version, or (`folder` not "") of another folder. Malformed entries are
// skipped: whatever the file holds, the worst outcome is a file hashed again.
ChecksumCache::Entries read_entries(const std::string& path, const std::string& folder) {
  ChecksumCache::Entries out;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > kMaxCacheBytes || ec) return out;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  const auto format = j.find("format"), version = j.find("version"), files = j.find("files"), at = j.find("folder");
  if (format == j.end() || *format != kFormat || version == j.end() || *version != kVersion) return out;
  if (files == j.end() || !files->is_object()) return out;
  if (!folder.empty() && (at == j.end() || *at != folder)) return out;
  for (const auto& [name, v] : files->items())
    if (auto e = parse_entry(v)) out[name] = *e;
  return out;
}

// Written whole through a temporary beside it (base/atomic_file.h); throws with the reason.
void write_entries(const std::string& path, const std::string& folder, const ChecksumCache::Entries& entries) {
  json files = json::object();
  for (const auto& [name, e] : entries)
    files[name] = {{"size", e.id.size}, {"mtime_ns", e.id.mtime_ns}, {"inode", e.id.inode}, {"sha256", e.sha256}};
  const json j = {{"format", kFormat}, {"version", kVersion}, {"folder", folder}, {"files", files}};
  const std::string text = j.dump(1) + "\n";  // a file name that is not UTF-8 throws: not cached
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

std::string size_text(std::uintmax_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

FileIdentity file_identity(const std::string& path) {
  int err = 0;
  const auto id = identity_of(path, &err);
  if (!id) input_error("{}: cannot stat the weight file ({})", path, std::strerror(err));
  return *id;
}

std::string user_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return (fs::path(xdg) / "tdiff").string();  // the spec ignores a relative one
  const char* home = std::getenv("HOME");
  if (home && home[0] != '\0') return (fs::path(home) / ".cache" / "tdiff").string();
  return "";
}

// ---- ChecksumCache -----------------------------------------------------------------------

ChecksumCache::ChecksumCache(const std::string& folder) : folder_(absolute_folder(folder)) {
  folder_file_ = (fs::path(folder_) / kFolderFile).string();
  if (const std::string dir = user_cache_dir(); !dir.empty())
    user_file_ = (fs::path(dir) / fmt::format("checksums-{}.json", bytes_sha256(folder_).substr(0, 16))).string();
  // The folder's file says which folder it was written in, but a folder moved or renamed keeps
  // its files' inodes: it is trusted wherever it is. The user's is keyed by the path.
  in_folder_ = read_entries(folder_file_, "");
  if (!user_file_.empty()) in_user_ = read_entries(user_file_, folder_);
}

std::optional<std::string> ChecksumCache::find(const std::string& name, const FileIdentity& id) const {
  for (const Entries* entries : {&in_folder_, &in_user_}) {
    auto it = entries->find(name);
    if (it != entries->end() && it->second.id == id) return it->second.sha256;
  }
  return std::nullopt;
}

void ChecksumCache::put(const std::string& name, const FileIdentity& id, const std::string& sha256) {
  const Entry e{id, sha256};
  for (Entries* entries : {&in_folder_, &in_user_}) {
    auto it = entries->find(name);
    if (it != entries->end() && it->second.id == id && it->second.sha256 == sha256) continue;
    (*entries)[name] = e;
    changed_ = true;
  }
}

std::string ChecksumCache::save() {
  if (!changed_) return "";
  std::string why_folder, why_user = "no $XDG_CACHE_HOME or $HOME for the user's cache";
  try {
    write_entries(folder_file_, folder_, in_folder_);
    changed_ = false;
    return "";
  } catch (const std::exception& e) {
    why_folder = e.what();
  }
  if (!user_file_.empty()) {
    try {
      fs::create_directories(fs::path(user_file_).parent_path());
      write_entries(user_file_, folder_, in_user_);
      changed_ = false;
      return "";
    } catch (const std::exception& e) {
      why_user = e.what();
    }
  }
  return fmt::format("checksums of {} not cached: {}; {}", folder_, why_folder, why_user);
}

// ---- hashing -----------------------------------------------------------------------------

FileHash hash_file(const std::string& path, HashMeter* meter) {
  FileHash h;
  const std::int64_t started = wall_ns();
  h.id = file_identity(path);
  std::function<void(std::size_t)> on_read;
  if (meter) on_read = [meter](std::size_t n) { meter->read(n); };
  h.sha256 = file_sha256(path, nullptr, on_read);
  const auto after = identity_of(path);
  h.cacheable = after && *after == h.id && h.id.mtime_ns < started - kRacyNs;
  if (meter) meter->file_done();
  return h;
}

std::string cache_hashes(const std::vector<std::pair<std::string, FileHash>>& hashed) {
  std::map<std::string, std::vector<const std::pair<std::string, FileHash>*>> by_folder;
  for (const auto& item : hashed)
    if (item.second.cacheable) by_folder[folder_of(item.first)].push_back(&item);
  std::vector<std::string> notes;
  for (const auto& [folder, items] : by_folder) {
    // Read now, just before the write: entries another command saved meanwhile are kept.
    ChecksumCache cache(folder);
    for (const auto* item : items) cache.put(fs::path(item->first).filename().string(), item->second.id, item->second.sha256);
    if (std::string note = cache.save(); !note.empty()) notes.push_back(std::move(note));
  }
  return fmt::format("{}", fmt::join(notes, "; "));
}

std::string ChecksumReport::summary() const {
  std::string s = fmt::format("checksums: {} of {} files hashed ({} from the cache", hashed, files, cached);
  if (hashed) s += fmt::format("; {} in {:.1f} s", size_text(hashed_bytes), seconds);
  if (recent) s += fmt::format("; {} modified within 2 s of its hash, not cached", recent);
  return s + ")";
}

std::vector<std::string> weight_checksums(const std::vector<std::string>& files, const ChecksumOptions& o,
                                          ChecksumReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> sums(files.size());
  std::vector<std::size_t> todo;  // indices of the files to hash
  std::uintmax_t todo_bytes = 0;
  {
    std::map<std::string, ChecksumCache> caches;  // by folder
    for (std::size_t i = 0; i < files.size(); ++i) {
      const std::string folder = folder_of(files[i]);
      const ChecksumCache& cache = caches.try_emplace(folder, folder).first->second;
      const FileIdentity id = file_identity(files[i]);
      const auto cached = o.rehash ? std::nullopt : cache.find(fs::path(files[i]).filename().string(), id);
      if (cached) sums[i] = *cached;
      else todo.push_back(i), todo_bytes += id.size;
    }
  }
  // The files are hashed on all threads (a release's shards: one a thread).
  std::vector<std::pair<std::string, FileHash>> hashed(todo.size());
  {
    HashMeter meter(todo_bytes, todo.size());
    ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t k = 0; k < todo.size(); ++k)
      errors.run(k, [&] { hashed[k] = {files[todo[k]], hash_file(files[todo[k]], &meter)}; });
    errors.rethrow();
  }
  ChecksumReport r;
  for (std::size_t k = 0; k < todo.size(); ++k) {
    sums[todo[k]] = hashed[k].second.sha256;
    r.hashed_bytes += hashed[k].second.id.size;
    if (!hashed[k].second.cacheable) ++r.recent;
  }
  r.note = cache_hashes(hashed);
  r.files = files.size();
  r.hashed = todo.size();
  r.cached = files.size() - todo.size();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report) *report = r;
  return sums;
}

// ---- HashMeter ---------------------------------------------------------------------------

struct HashMeter::State {
  std::mutex mutex;
  std::uintmax_t total = 0, done = 0;
  std::size_t files = 0, files_done = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last;
  bool tty = ::isatty(2) != 0, shown = false;
};

HashMeter::HashMeter(std::uintmax_t total_bytes, std::size_t total_files) : s_(std::make_unique<State>()) {
  s_->total = total_bytes;
  s_->files = total_files;
}

HashMeter::~HashMeter() {
  if (s_->tty && s_->shown) fmt::print(stderr, "\r\033[K");
}

void HashMeter::add_file(std::uintmax_t bytes) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  s_->total += bytes;
  ++s_->files;
}

void HashMeter::read(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  s_->done += bytes;
  maybe_show();
}

void HashMeter::file_done() {
  std::lock_guard<std::mutex> lock(s_->mutex);
  ++s_->files_done;
  maybe_show();
}

std::string HashMeter::line(std::uintmax_t done, std::uintmax_t total, std::size_t files_done, std::size_t files) {
  return fmt::format("checksums: hashing {:.1f} of {:.1f} GB ({} of {} files done)", static_cast<double>(done) / 1e9,
                     static_cast<double>(total) / 1e9, files_done, files);
}

void HashMeter::maybe_show() {  // the mutex is held
  using namespace std::chrono_literals;
  const auto now = std::chrono::steady_clock::now();
  if (now - s_->start < 2s) return;
  if (s_->shown && now - s_->last < (s_->tty ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000))) return;
  const std::string text = line(s_->done, s_->total, s_->files_done, s_->files);
  if (s_->tty) fmt::print(stderr, "\r\033[K{}", text);
  else fmt::print(stderr, "{}\n", text);
  std::fflush(stderr);
  s_->last = now;
  s_->shown = true;
}

}  // namespace tdiff
