#include "base/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace tdiff {

namespace fs = std::filesystem;

namespace {

// The signal handler may only call async-signal-safe functions (unlink, rmdir): the paths live
// in fixed buffers, each published by an atomic state, so the handler never takes a lock.
constexpr int kSlots = 64;
constexpr std::size_t kPathMax = 4096;
enum SlotState : int { kFree = 0, kFilling = 1, kActive = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathMax];
};
std::array<Slot, kSlots> g_slots;

extern "C" void remove_temps_and_die(int sig) {
  // Files first, then folders (a registered folder is empty once its registered files are gone).
  for (auto& s : g_slots)
    if (s.state.load() == kActive) ::unlink(s.path);
  for (auto& s : g_slots)
    if (s.state.load() == kActive) ::rmdir(s.path);
  // SA_RESETHAND restored the default action: die of the same signal.
  ::raise(sig);
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
  std::random_device rd;
  return fmt::format("{}.tmp-{}-{:08x}", target, ::getpid(), rd());
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

void install_temp_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal the parent set to be ignored (a background job of a non-interactive shell)
    // stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temps_and_die;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

std::size_t remove_stale_temps(const std::string& target) {
  const fs::path t = fs::absolute(target);
  const std::string prefix = t.filename().string() + ".tmp-";
  std::error_code ec;
  std::size_t removed = 0;
  for (fs::directory_iterator it(t.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = parse_temp_suffix(name.substr(prefix.size()));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

}  // namespace tdiff
