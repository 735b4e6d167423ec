#pragma once
// Inline SVG line plots for report.html: one value per stage along the model, layer bands
// behind, dashed threshold lines (each over the stages it applies to), points coloured by verdict and linked to the table.
#include <functional>
#include <string>
#include <vector>

#include "diff/thresholds.h"

namespace tdiff::report {

struct PlotPoint {
  double y = 0.0;       // already clamped into [y_lo, y_hi] by the caller
  Verdict verdict = Verdict::pass;
  std::string tip;      // tooltip text
  std::string href;     // "#row-12": the table row
};
struct PlotLine {
  double y = 0.0;
  std::string label;    // "": none
  std::string css;      // "warn" or "fail"
  std::size_t begin = 0, end = 0;  // the points it spans, [begin, end); end 0: the whole width
};
struct PlotBand {
  std::size_t begin = 0, end = 0;  // point indices [begin, end)
  std::string label;
};

struct PlotSpec {
  std::string title;
  std::vector<PlotPoint> points;
  std::vector<PlotLine> lines;
  std::vector<PlotBand> bands;
  double y_lo = 0.0, y_hi = 1.0;  // widened to whole tick steps
  double min_step = 0.0;          // smallest tick step (1: whole decades on a log axis)
  std::function<std::string(double)> tick;  // y-axis tick text
  std::ptrdiff_t marker = -1;     // a point to mark with a vertical line (the first divergence); -1 none
  std::string marker_label;
};
std::string svg_plot(const PlotSpec& spec);

}  // namespace tdiff::report
