#include "base/temp_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace tdiff {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = ".tdiff.tmp-";

// The signal handler may only call async-signal-safe functions (unlinkat, openat, getdents64,
// rmdir): the paths live in fixed buffers, each published by an atomic state, so the handler
// never takes a lock.
constexpr int kSlots = 64;
constexpr std::size_t kPathMax = 4096;
enum SlotState : int { kFree = 0, kFilling = 1, kActive = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathMax];
};
std::array<Slot, kSlots> g_slots;

// How many SignalDeferrals are alive, or kDying once a handler has begun removing the
// temporaries; the signal a handler noted while deferred (0: none).
constexpr int kDying = -1;
std::atomic<int> g_phase{0};
std::atomic<int> g_deferred{0};

// Removes `name` in the folder `dirfd` and, when it is a folder, what it holds (`depth` levels
// down), with async-signal-safe calls only: no opendir, which allocates.
void remove_tree_at(int dirfd, const char* name, int depth) {
  if (::unlinkat(dirfd, name, 0) == 0 || (errno != EISDIR && errno != EPERM) || depth == 0) return;
  const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  // Entries removed while the folder is read may hide others: read it again while it is not empty.
  for (int pass = 0; pass < 3; ++pass) {
    ::lseek(fd, 0, SEEK_SET);
    alignas(dirent64) char buf[2048];
    for (ssize_t n; (n = ::getdents64(fd, buf, sizeof buf)) > 0;) {
      for (ssize_t at = 0; at < n;) {
        const auto* d = reinterpret_cast<const dirent64*>(buf + at);
        at += d->d_reclen;
        if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) remove_tree_at(fd, d->d_name, depth - 1);
      }
    }
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno != ENOTEMPTY) break;
  }
  ::close(fd);
}

// Removes every registered path, then dies of `sig` (at once, or when the handler returns).
void remove_temps_and_die(int sig) {
  for (auto& s : g_slots)
    if (s.state.load() == kActive) remove_tree_at(AT_FDCWD, s.path, 8);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

// The handler. The first signal removes the temporaries and kills; one that comes during a
// SignalDeferral is noted for the deferral's end; one that comes while another is removing the
// temporaries returns at once (that one ends the process; waiting here could block it).
extern "C" void on_fatal_signal(int sig) {
  int phase = 0;
  if (g_phase.compare_exchange_strong(phase, kDying)) {
    remove_temps_and_die(sig);
  } else if (phase > 0) {
    g_deferred.store(sig);  // the last SignalDeferral acts on it
    // ... unless it ended between the two steps above: then act now.
    phase = 0;
    if (g_phase.compare_exchange_strong(phase, kDying)) {
      g_deferred.store(0);
      remove_temps_and_die(sig);
    }
  }
}

// "<digits>-<8 hex>" -> the pid, or -1.
long parse_temp_suffix(const std::string& s) {
  const auto dash = s.find('-');
  if (dash == 0 || dash == std::string::npos || s.size() != dash + 9) return -1;
  for (std::size_t i = 0; i < dash; ++i)
    if (s[i] < '0' || s[i] > '9') return -1;
  for (std::size_t i = dash + 1; i < s.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return -1;
  if (dash > 9) return -1;  // more digits than any pid
  return std::stol(s.substr(0, dash));
}

}  // namespace

std::string temp_name(const std::string& target) {
  const fs::path t(target);
  std::random_device rd;
  return (t.parent_path() / fmt::format(".{}{}{}-{:08x}", t.filename().string(), kMarker, ::getpid(), rd())).string();
}

bool is_stale_temporary(const std::string& name) {
  const auto at = name.rfind(kMarker);
  if (name.empty() || name[0] != '.' || at == std::string::npos || at < 2) return false;
  const long pid = parse_temp_suffix(name.substr(at + std::strlen(kMarker)));
  if (pid <= 0 || pid == ::getpid()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;  // EPERM: alive, another user's
}

TempRegistration::TempRegistration(const std::string& path) {
  if (path.size() >= kPathMax) throw std::runtime_error("temporary path too long: " + path);
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kActive);
    slot_ = i;
    return;
  }
  throw std::runtime_error("more than 64 temporary files at once: " + path);
}

TempRegistration& TempRegistration::operator=(TempRegistration&& o) noexcept {
  if (this != &o) {
    reset();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

void TempRegistration::reset() {
  if (slot_ >= 0) g_slots[static_cast<std::size_t>(slot_)].state.store(kFree);
  slot_ = -1;
}

SignalDeferral::SignalDeferral() {
  for (int phase = g_phase.load();;) {
    if (phase == kDying) {
      for (;;) ::pause();  // a handler is removing the temporaries and ends the process
    }
    if (g_phase.compare_exchange_weak(phase, phase + 1)) return;
  }
}

SignalDeferral::~SignalDeferral() {
  if (g_phase.fetch_sub(1) != 1) return;
  const int sig = g_deferred.exchange(0);
  if (!sig) return;
  // As in a handler: no second signal may interrupt the removal; the raised one kills once
  // the mask is back.
  sigset_t fatal, old;
  sigemptyset(&fatal);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&fatal, s);
  ::pthread_sigmask(SIG_BLOCK, &fatal, &old);
  on_fatal_signal(sig);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void install_temp_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal the parent set to be ignored (a background job of a non-interactive shell)
    // stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    // The three wait for each other: a second one must not interrupt the first one's cleanup.
    sigemptyset(&sa.sa_mask);
    for (int other : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, other);
    ::sigaction(sig, &sa, nullptr);
  }
}

std::size_t remove_stale_temporaries(const std::string& folder) {
  std::error_code ec;
  std::size_t removed = 0;
  for (fs::directory_iterator it(folder.empty() ? "." : folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (!is_stale_temporary(it->path().filename().string())) continue;
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

}  // namespace tdiff
