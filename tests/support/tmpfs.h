#pragma once
// A small tmpfs mounted for a test (a full disk, a read-only mount), unmounted at the end.
// `mounted` is false where mounting is not allowed (not root, a container without the right):
// the tests that need one skip that part.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace tdiff::testing {

struct Tmpfs {
  std::filesystem::path dir;
  bool mounted = false;
  Tmpfs(const std::filesystem::path& d, const std::string& size) : dir(d) {
    std::filesystem::create_directories(dir);
    mounted = run(fmt::format("mount -t tmpfs -o size={} tmpfs '{}' 2>/dev/null", size, dir.string())) == 0;
  }
  ~Tmpfs() {
    if (mounted) run(fmt::format("umount '{}'", dir.string()));
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  void fill() const { run(fmt::format("dd if=/dev/zero of='{}/filler' bs=64k >/dev/null 2>&1", dir.string())); }
  bool read_only() const { return run(fmt::format("mount -o remount,ro '{}' 2>/dev/null", dir.string())) == 0; }

 private:
  static int run(const std::string& cmd) { return std::system(cmd.c_str()); }
};

}  // namespace tdiff::testing
