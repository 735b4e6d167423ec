#include "base/file_seal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "base/parallel_errors.h"
#include "base/sha256.h"

namespace tdiff {

namespace {

constexpr std::uint64_t kPiece = std::uint64_t{64} << 20;  // one thread's share of the hash
constexpr std::uint64_t kEnds = std::uint64_t{1} << 20;    // quick: first and last MiB
constexpr std::uint64_t kSample = std::uint64_t{64} << 10;
constexpr int kSamples = 16;
constexpr std::uint64_t kMaxBlock = std::uint64_t{1} << 20;  // larger: not a record tdiff writes
constexpr char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Fd open_file(const std::string& path, int flags, const std::string& shown) {
  Fd f{::open(path.c_str(), flags | O_CLOEXEC)};
  if (f.fd < 0) input_error("{}: cannot open the file ({})", shown, std::strerror(errno));
  return f;
}

std::uint64_t file_size(int fd, const std::string& shown) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) input_error("{}: cannot stat the file ({})", shown, std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

// Reads [offset, offset + n) into the hash (short at the end of the file).
void hash_range(int fd, std::uint64_t offset, std::uint64_t n, Sha256& h, const std::string& shown) {
  std::vector<char> buf(static_cast<std::size_t>(std::min<std::uint64_t>(n, std::uint64_t{1} << 20)));
  while (n > 0) {
    const ssize_t got = ::pread(fd, buf.data(), std::min<std::uint64_t>(n, buf.size()), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) input_error("{}: read error ({})", shown, std::strerror(errno));
    if (got == 0) return;
    h.add(buf.data(), static_cast<std::size_t>(got));
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::uint64_t>(got);
  }
}

std::string quick_fingerprint(int fd, std::uint64_t size, std::uint64_t block, const std::string& shown) {
  Sha256 h;
  h.add(&size, sizeof size);
  const std::uint64_t data = size > block ? size - block : 0;
  hash_range(fd, block, std::min(data, kEnds), h, shown);
  hash_range(fd, block + (data > kEnds ? data - kEnds : 0), std::min(data, kEnds), h, shown);
  for (int i = 0; i < kSamples; ++i) {
    const std::uint64_t at = data > kSample ? (data - kSample) / (kSamples - 1) * static_cast<std::uint64_t>(i) : 0;
    hash_range(fd, block + at, std::min(data, kSample), h, shown);
  }
  return h.hex();
}

// The pieces on all threads, then the hash of their hashes (file_seal.h).
std::string piecewise_sha256(int fd, std::uint64_t size, std::uint64_t block, const std::string& shown) {
  const std::uint64_t data = size > block ? size - block : 0;
  const auto pieces = static_cast<std::int64_t>((data + kPiece - 1) / kPiece);
  std::vector<std::string> sums(static_cast<std::size_t>(pieces));
  ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < pieces; ++i)
    errors.run(static_cast<std::size_t>(i), [&] {
      const std::uint64_t at = static_cast<std::uint64_t>(i) * kPiece;
      Sha256 h;
      hash_range(fd, block + at, std::min(kPiece, data - at), h, shown);
      sums[static_cast<std::size_t>(i)] = h.hex();
    });
  errors.rethrow();
  Sha256 all;
  for (const auto& s : sums) all.add(s.data(), s.size());
  return all.hex();
}

bool parse_u64(const std::string& text, std::uint64_t& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size() && !text.empty();
}

bool is_hex64(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The record's text (the block's bytes before the NUL padding) into r; "" or what is wrong.
std::string parse_record(const std::string& text, SealRecord& r) {
  const std::string body = text.substr(std::strlen(kSealMagic));
  std::size_t at = 0;
  int seen = 0;
  for (const char* key : {"block=", "size=", "quick=", "sha256="}) {
    const std::size_t end = body.find('\n', at);
    if (end == std::string::npos || body.compare(at, std::strlen(key), key) != 0)
      return fmt::format("no '{}' line where expected", std::string(key, std::strlen(key) - 1));
    const std::string value = body.substr(at + std::strlen(key), end - at - std::strlen(key));
    bool ok = true;
    switch (seen++) {
      case 0:
        ok = parse_u64(value, r.block);
        break;
      case 1:
        ok = parse_u64(value, r.size);
        break;
      case 2:
        ok = is_hex64(value);
        r.quick = value;
        break;
      default:
        ok = is_hex64(value);
        r.sha256 = value;
        break;
    }
    if (!ok) return fmt::format("'{}{}' is not valid", key, value);
    at = end + 1;
  }
  if (at != body.size()) return "unexpected text after the record";
  return {};
}

// Whether the bytes [from, block) are all NUL (the record's padding; a flipped byte there is
// damage too, though no hash covers the block).
bool nul_padded(int fd, std::uint64_t from, std::uint64_t block, const std::string& shown) {
  std::vector<char> buf(static_cast<std::size_t>(block > from ? block - from : 0));
  std::size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(from + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) input_error("{}: read error ({})", shown, std::strerror(errno));
    if (n == 0) return false;  // the file ends inside its block
    done += static_cast<std::size_t>(n);
  }
  return std::all_of(buf.begin(), buf.end(), [](char c) { return c == '\0'; });
}

}  // namespace

std::string format_seal(const SealRecord& r) {
  std::string out =
      fmt::format("{}block={}\nsize={}\nquick={}\nsha256={}\n", kSealMagic, r.block, r.size, r.quick, r.sha256);
  if (out.size() > r.block) throw std::logic_error("format_seal: the record does not fit its block");
  out.resize(static_cast<std::size_t>(r.block), '\0');
  return out;
}

SealRead read_seal(const std::string& path) {
  Fd f = open_file(path, O_RDONLY, path);
  std::string head(kSealBlock, '\0');
  ssize_t got = 0;
  do got = ::pread(f.fd, head.data(), head.size(), 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) input_error("{}: read error ({})", path, std::strerror(errno));
  head.resize(static_cast<std::size_t>(got));
  SealRead out;
  const bool magic = head.rfind(kSealMagic, 0) == 0;
  const bool remains = head.size() == kSealBlock && head.rfind(kHdf5Signature, 0) != 0 &&
                       (head.find("\nsize=") != std::string::npos || head.find("\nsha256=") != std::string::npos);
  if (!magic && !remains) return out;
  out.sealed = true;
  if (!magic) {
    out.damage = "its integrity record is damaged (the first line is not 'tdiff-seal 1')";
    return out;
  }
  // The block's text ends at the first NUL; everything after it must be NUL padding.
  const std::string text = head.substr(0, std::min(head.find('\0'), head.size()));
  if (const std::string why = parse_record(text, out.record); !why.empty()) {
    out.damage = fmt::format("its integrity record is damaged ({})", why);
    return out;
  }
  const SealRecord& r = out.record;
  if (r.block < kSealBlock || r.block > kMaxBlock || (r.block & (r.block - 1)) != 0)
    out.damage = fmt::format("its integrity record is damaged (block={} is not a user block size)", r.block);
  else if (!nul_padded(f.fd, text.size(), r.block, path))
    out.damage = "its integrity record is damaged (bytes after the record)";
  return out;
}

SealRecord compute_seal(const std::string& path, std::uint64_t block, bool full) {
  Fd f = open_file(path, O_RDONLY, path);
  SealRecord r;
  r.block = block;
  r.size = file_size(f.fd, path);
  r.quick = quick_fingerprint(f.fd, r.size, block, path);
  if (full) r.sha256 = piecewise_sha256(f.fd, r.size, block, path);
  return r;
}

void write_seal(const std::string& path, std::uint64_t block, const std::string& shown) {
  const std::string bytes = format_seal(compute_seal(path, block));
  Fd f = open_file(path, O_WRONLY, shown);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(f.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) input_error("{}: cannot write the integrity record ({})", shown, std::strerror(n < 0 ? errno : EIO));
    done += static_cast<std::size_t>(n);
  }
}

std::optional<SealCheck> check_seal(const std::string& path, bool full) {
  const SealRead s = read_seal(path);
  if (!s.sealed) return std::nullopt;
  SealCheck c;
  if (!s.damage.empty()) {
    c.damage = s.damage;
    return c;
  }
  const SealRecord& want = s.record;
  Fd f = open_file(path, O_RDONLY, path);
  const std::uint64_t size = file_size(f.fd, path);
  if (size != want.size) {
    c.damage = size < want.size
                   ? fmt::format("it is truncated ({} of the {} bytes it was written with)", size, want.size)
                   : fmt::format("it has {} bytes, {} more than it was written with", size, size - want.size);
    return c;
  }
  if (quick_fingerprint(f.fd, size, want.block, path) != want.quick) {
    c.damage = "its first, last or sampled bytes differ from the record";
    return c;
  }
  if (!full) return c;
  c.hashed = true;
  if (piecewise_sha256(f.fd, size, want.block, path) != want.sha256) c.damage = "its SHA-256 differs from the record";
  return c;
}

}  // namespace tdiff
