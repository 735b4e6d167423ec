#pragma once
// Stage-name patterns: shell globs (fnmatch: *, ?, [a-z]) separated by commas,
// e.g. "L0[2-4].attn.*,lm_head". An empty pattern matches everything.
#include <string>
#include <vector>

#include "model/stage_graph.h"

namespace tdiff {

bool pattern_matches(const std::string& pattern, const std::string& name);
// The stages a pattern selects; InputError naming the pattern and the glob when one of its
// globs matches no stage.
std::vector<std::string> select_stages(const std::string& pattern, const std::vector<Stage>& stages);

}  // namespace tdiff
