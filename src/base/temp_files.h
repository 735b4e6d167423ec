#pragma once
// The temporaries tdiff writes beside a target before renaming them into place
// (base/atomic_file.h), and the three things that remove them when a command does not get
// that far:
//   - the owner, on an error (AtomicFile's and AtomicFolder's destructors);
//   - a SIGINT/SIGTERM/SIGHUP handler (install_temp_cleanup), for every path registered with
//     a TempRegistration: an interrupted command leaves nothing behind;
//   - a later writer in the same folder (remove_stale_temporaries), for what SIGKILL or a
//     crash left: temporaries whose process no longer exists.
// One name scheme: ".<target's name>.tdiff.tmp-<pid>-<8 hex digits>" (hidden, and with ".tmp"
// in it for whoever looks for leftovers). Stale ones are recognised by that pattern and a pid
// that kill(pid, 0) says does not exist on this host (a folder shared between hosts could
// hold a live process's temporary of another host: tdiff assumes it does not).
#include <cstddef>
#include <string>

namespace tdiff {

// A fresh temporary name beside `target`: "<folder>/.<name>.tdiff.tmp-<pid>-<8 hex>".
std::string temp_name(const std::string& target);

// True when the file name `name` (no folder) follows the scheme and its pid is neither this
// process nor any live one.
bool is_stale_temporary(const std::string& name);

// While alive, `path` (a file, or a folder with everything in it) is removed if the process
// gets SIGINT, SIGTERM or SIGHUP. It does not remove the path itself: its owner does, or
// renames it into place. At most 64 registrations at once (std::runtime_error beyond).
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

// While alive, SIGINT/SIGTERM/SIGHUP wait: a handler that runs meanwhile only notes the
// signal, which takes effect (temporaries removed, death by it) when the last deferral ends.
// For steps that must not be cut in two, such as moving an old folder aside and the new one in.
class SignalDeferral {
 public:
  SignalDeferral();
  ~SignalDeferral();
  SignalDeferral(const SignalDeferral&) = delete;
  SignalDeferral& operator=(const SignalDeferral&) = delete;
};

// Installs the handlers (once, from main): remove every registered path, then die of the
// signal as before (the exit status still says which signal).
void install_temp_cleanup();

// Removes the stale temporaries (files or folders) in `folder`; returns how many. Errors are
// ignored: this is housekeeping.
std::size_t remove_stale_temporaries(const std::string& folder);

}  // namespace tdiff
