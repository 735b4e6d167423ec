#pragma once
// Shell quoting for the "exact command that reproduces this run" printed with every report.
#include <filesystem>
#include <string>

namespace tdiff::cli {

inline std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                        std::string::npos)
    return a;
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string absolute_path(const std::string& p) {
  return std::filesystem::absolute(p).lexically_normal().string();
}

}  // namespace tdiff::cli
