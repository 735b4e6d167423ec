#include "model/pattern.h"

#include <fnmatch.h>

#include <sstream>

#include "base/error.h"

namespace tdiff {

bool pattern_matches(const std::string& pattern, const std::string& name) {
  if (pattern.empty()) return true;
  std::stringstream ss(pattern);
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty() && fnmatch(part.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

std::vector<std::string> select_stages(const std::string& pattern, const std::vector<Stage>& stages) {
  std::vector<std::string> out;
  for (const auto& s : stages)
    if (pattern_matches(pattern, s.name)) out.push_back(s.name);
  if (out.empty()) input_error("stage pattern '{}' matches no stage of this model", pattern);
  return out;
}

}  // namespace tdiff
