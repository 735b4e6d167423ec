#pragma once
// The history as series over builds: the runs of one case grouped by label (a build, a branch),
// the labels in the order they first ran, and per label the median of each figure over its
// runs (repeats) and their spread, the noise a step or a gate must exceed. What `tdiff history`
// draws and `tdiff gate` judges.
#include <map>
#include <string>
#include <vector>

#include "history/run_entry.h"

namespace tdiff::history {

// The median of `v` (the mean of the two middle values for an even count; NaN when empty).
double median(std::vector<double> v);

// One figure of one build: the median over its runs and the spread (max - min) among them.
struct Point {
  double value = kNone;
  double spread = kNone;  // NaN: a single run, no repeat to measure noise by
  int runs = 0;
};

struct Build {
  std::string label;
  std::string first_date, last_date;
  std::vector<const RunEntry*> runs;  // oldest first
  std::string latest_verdict;
  std::map<std::string, Point> figures;  // by figure name (figure_names())
};

// The figures a build gets where its runs have them: "forward_s", "tokens_per_s", "logits_kl",
// "logits_top1", "logits_top10", "worst_ratio" (the largest error / expected over the run's
// tensors), and per stage class "error:<class>" (its tensors' largest relative error) and
// "seconds:<class>" (the profiled forward's).
std::vector<Build> builds_of(const std::vector<RunEntry>& runs);
// Whether a larger value of the figure is better (tokens_per_s, top-1/top-10 agreement).
bool higher_is_better(const std::string& figure);
// Every figure name any build has, the whole-model ones first.
std::vector<std::string> figure_names(const std::vector<Build>& builds);

// A change of level in a series: at index `at` (the first build of the new level).
struct Step {
  std::size_t at = 0;
  double before = kNone, after = kNone;
};
// Steps of `y` (NaN entries skipped): the piecewise-constant fit with the least absolute
// deviation plus `penalty` per step (dynamic programming over every segmentation; asv's rule
// for regressions). `noise`: a level change within it is not a step. Both absolute.
std::vector<Step> detect_steps(const std::vector<double>& y, double noise);
// The noise of a figure over builds: the largest spread measured by repeats, and at least
// `relative` of the series' median magnitude (two runs of one build are rarely enough to know it).
double series_noise(const std::vector<Build>& builds, const std::string& figure, double relative);

}  // namespace tdiff::history
