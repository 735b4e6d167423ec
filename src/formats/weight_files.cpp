#include "formats/weight_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/error.h"
#include "base/parallel_errors.h"
#include "formats/checksum_cache.h"
#include "formats/safetensors.h"
#include "base/sha256.h"

namespace tdiff {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kMaxHeader = std::uint64_t{64} << 20;
constexpr std::uint64_t kBlock = std::uint64_t{64} << 10;
constexpr int kSamples = 16;

// Reads [offset, offset + n) into the hash (short at the end of the file).
void hash_range(int fd, std::uint64_t offset, std::uint64_t n, Sha256& h, const std::string& path) {
  std::vector<char> buf(static_cast<std::size_t>(std::min<std::uint64_t>(n, kBlock)));
  while (n > 0) {
    const ssize_t got = ::pread(fd, buf.data(), std::min<std::uint64_t>(n, buf.size()), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) input_error("{}: read error ({})", path, std::strerror(errno));
    if (got == 0) return;
    h.add(buf.data(), static_cast<std::size_t>(got));
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::uint64_t>(got);
  }
}

std::string fingerprint(int fd, std::uint64_t size, const std::string& path) {
  Sha256 h;
  h.add(&size, sizeof size);
  std::uint64_t header = 0;
  unsigned char len[8] = {};
  if (size >= 8 && ::pread(fd, len, 8, 0) == 8)
    for (int i = 0; i < 8; ++i) header |= std::uint64_t{len[i]} << (8 * i);
  hash_range(fd, 0, 8 + std::min(header, kMaxHeader), h, path);
  for (int i = 0; i < kSamples; ++i) {
    const std::uint64_t at = size > kBlock ? (size - kBlock) / (kSamples - 1) * static_cast<std::uint64_t>(i) : 0;
    hash_range(fd, at, kBlock, h, path);
  }
  return h.hex();
}

std::map<std::string, std::string> parse_stat(const std::string& record) {
  std::map<std::string, std::string> out;
  std::istringstream in(record);
  std::string item;
  while (in >> item)
    if (auto eq = item.find('='); eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
  return out;
}

// One file against its record: why it differs ("" when it matches), whether it was hashed
// (and its size), and its current record when that should replace the case's.
struct FileVerdict {
  std::string why, refreshed;
  bool hashed = false;
  std::uintmax_t bytes = 0;
  FileHash hash;  // when hashed: for the folder's checksum cache
};

// `meter`: counts the bytes hashed; in the quick check the files to hash are added to it as
// they turn up (the full check counts them all up front).
// `cache`: the folder's checksum cache, which vouches for a file whose size, time and inode it
// recorded with the same SHA-256 (a case made before the files were touched or copied back).
FileVerdict compare_file(const std::string& path, const std::string& sha, const std::string& recorded, bool full,
                         HashMeter& meter, const ChecksumCache* cache) {
  FileVerdict v;
  const std::string stat_now = weight_file_stat(path);
  const auto was = parse_stat(recorded), now = parse_stat(stat_now);
  if (!full && !recorded.empty()) {
    if (was.count("size") && was.at("size") != now.at("size")) {
      v.why = fmt::format("size {} bytes, recorded {}", now.at("size"), was.at("size"));
      return v;
    }
    if (was.count("fingerprint") && was.at("fingerprint") != now.at("fingerprint")) {
      v.why = "its header or sampled bytes differ from the record";
      return v;
    }
    if (was.count("mtime_ns") && was.at("mtime_ns") == now.at("mtime_ns")) return v;
  }
  if (!full && cache && cache->find(fs::path(path).filename().string(), file_identity(path)) == sha) return v;
  v.hashed = true;
  std::error_code ec;
  v.bytes = fs::file_size(path, ec);
  if (!full) meter.add_file(v.bytes);
  v.hash = hash_file(path, &meter);
  if (v.hash.sha256 != sha) v.why = "its SHA-256 differs from the record";
  else if (recorded != stat_now) v.refreshed = stat_now;
  return v;
}

}  // namespace

std::string weight_file_stat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) input_error("{}: cannot read the weight file ({})", path, std::strerror(errno));
  struct stat st {};
  std::string fp;
  try {
    if (::fstat(fd, &st) != 0) input_error("{}: cannot stat the weight file ({})", path, std::strerror(errno));
    fp = fingerprint(fd, static_cast<std::uint64_t>(st.st_size), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const std::int64_t ns = std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return fmt::format("size={} mtime_ns={} fingerprint={}", st.st_size, ns, fp);
}

WeightCheck check_weight_files(const std::vector<std::string>& files, const std::map<std::string, std::string>& sha256,
                               const std::map<std::string, std::string>& stats, bool full) {
  WeightCheck check;
  check.recorded = !sha256.empty();
  if (!check.recorded) return check;
  const auto t0 = std::chrono::steady_clock::now();
  // The files are compared (hashed where their record cannot vouch for them) on all threads,
  // then reported in their order.
  std::vector<FileVerdict> verdicts(files.size());
  {
    std::uintmax_t total = 0;
    std::size_t to_hash = 0;
    std::error_code ec;
    for (const auto& f : files)
      if (full && sha256.count(fs::path(f).filename().string())) total += fs::file_size(f, ec), ++to_hash, ec.clear();
    HashMeter meter(total, to_hash);
    std::optional<ChecksumCache> cache;
    if (!files.empty()) cache.emplace(fs::path(files.front()).parent_path().string());
    ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t i = 0; i < files.size(); ++i)
      errors.run(i, [&] {
        const std::string name = fs::path(files[i]).filename().string();
        auto sum = sha256.find(name);
        if (sum == sha256.end()) return;
        auto st = stats.find(name);
        verdicts[i] = compare_file(files[i], sum->second, st == stats.end() ? "" : st->second, full, meter,
                                   cache ? &*cache : nullptr);
      });
    errors.rethrow();
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i];
    const std::string name = fs::path(path).filename().string();
    seen.insert(name);
    ++check.files;
    if (!sha256.count(name)) {
      check.changed.push_back(fmt::format("{}: not among the files the case records", path));
      continue;
    }
    const FileVerdict& v = verdicts[i];
    if (v.hashed) ++check.hashed_files, check.hashed_bytes += v.bytes;
    if (!v.refreshed.empty()) check.refreshed[name] = v.refreshed;
    if (!v.why.empty()) check.changed.push_back(fmt::format("{}: {}", path, v.why));
  }
  for (const auto& [name, sum] : sha256)
    if (!seen.count(name)) check.changed.push_back(fmt::format("{}: recorded in the case, missing from the model folder", name));
  // What was hashed here need not be hashed by the next `case new` of this folder.
  std::vector<std::pair<std::string, FileHash>> hashed;
  for (std::size_t i = 0; i < files.size(); ++i)
    if (verdicts[i].hashed) hashed.emplace_back(files[i], verdicts[i].hash);
  check.cache_note = cache_hashes(hashed);
  check.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return check;
}

}  // namespace tdiff
