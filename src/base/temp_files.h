#pragma once
// Temporary files and folders that tdiff writes beside a target and renames into place, and
// the three things that remove them when a command does not get that far:
//   - the owner, on an error (H5Writer's destructor, write_report_files);
//   - a SIGINT/SIGTERM/SIGHUP handler (install_temp_cleanup), for every path registered with
//     a TempRegistration: interrupted golden and run leave nothing behind;
//   - a later command (remove_stale_temps), for what SIGKILL or a crash left: it removes the
//     temporaries of its target whose process no longer exists.
// Names: <target>.tmp-<pid>-<8 hex digits> (temp_name). Stale ones are recognised by that
// pattern and a PID that kill(pid, 0) says does not exist on this host (a folder shared
// between hosts could hold a live process's temporary of another host: tdiff assumes it does not).
#include <cstddef>
#include <string>

namespace tdiff {

// A fresh temporary name beside `target`: "<target>.tmp-<pid>-<8 hex>".
std::string temp_name(const std::string& target);

// While alive, `path` (a file, or a folder whose files are registered too) is removed if the
// process gets SIGINT, SIGTERM or SIGHUP. It does not remove the path itself: its owner does,
// or renames it into place. At most 64 registrations at once (std::runtime_error beyond).
class TempRegistration {
 public:
  TempRegistration() = default;
  explicit TempRegistration(const std::string& path);
  ~TempRegistration() { reset(); }
  TempRegistration(TempRegistration&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  TempRegistration& operator=(TempRegistration&& o) noexcept;
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;
  void reset();  // forget the path (it was renamed into place, or removed)

 private:
  int slot_ = -1;
};

// Installs the handlers (once, from main): remove every registered path, then die of the
// signal as before (the exit status still says which signal).
void install_temp_cleanup();

// Removes temporaries "<target>.tmp-<pid>-<hex>" beside `target` (files or folders) whose
// process no longer exists; returns how many. Errors are ignored: this is housekeeping.
std::size_t remove_stale_temps(const std::string& target);

}  // namespace tdiff
