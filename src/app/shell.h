#pragma once
// Paths and shell quoting (casefile/env_record.h) for the exact command that reproduces a run,
// printed with every report.
#include <filesystem>
#include <string>

#include "casefile/env_record.h"

namespace tdiff::app {

inline std::string absolute_path(const std::string& p) {
  return std::filesystem::absolute(p).lexically_normal().string();
}

}  // namespace tdiff::app
