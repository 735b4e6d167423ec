#pragma once
// Errors a user can cause (bad file, bad tensor, bad stage name, bad config).
// The CLI turns InputError into a one-line message and exit code 2.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tdiff {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

template <class... Args>
[[noreturn]] void input_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tdiff
