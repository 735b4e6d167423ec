#pragma once
// `tdiff history --html`: one page per history, per case the dual curve (the median timed
// forward of each build against its logits' KL, the builds joined in the order they ran, so a
// step that bought speed with accuracy shows as a move right-and-up), the table over builds,
// and one small chart per figure (history/series.h) with the detected steps marked at the build
// that made them. Inline SVG, no script: the page opens anywhere, attached to a ticket.
#include <string>
#include <vector>

#include "history/series.h"

namespace tdiff::report {

struct HistoryCase {
  std::string name;  // the case's file name
  std::vector<history::Build> builds;
  // Per figure (figure_names order): its steps and the noise they were detected against.
  std::vector<std::pair<std::string, std::vector<history::Step>>> steps;
  std::vector<double> noise;
};

std::string render_history_html(const std::string& title, const std::vector<HistoryCase>& cases);

}  // namespace tdiff::report
