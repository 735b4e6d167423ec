#include "model/pattern.h"

#include <fnmatch.h>

#include <algorithm>
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
  // Every glob must match a stage: one that matches none (a typo, a layer this model lacks)
  // would narrow the run to the others without a word.
  std::stringstream ss(pattern);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    const bool any = std::any_of(stages.begin(), stages.end(),
                                 [&](const Stage& s) { return fnmatch(part.c_str(), s.name.c_str(), 0) == 0; });
    if (!any)
      input_error("--stages '{}': '{}' matches no stage of this model (`tdiff info CASE --stages` lists them)", pattern,
                  part);
  }
  std::vector<std::string> out;
  for (const auto& s : stages)
    if (pattern_matches(pattern, s.name)) out.push_back(s.name);
  if (out.empty())
    input_error("--stages '{}' matches no stage of this model (`tdiff info CASE --stages` lists them)", pattern);
  return out;
}

}  // namespace tdiff
