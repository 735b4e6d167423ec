#pragma once
// The step axis of a generation run against a cache in report.html (diff/step_errors.h): a
// step x layer heatmap of the worst step error over the expected one among each layer's
// tensors (the prologue and the head as rows of their own), and the step note of every report.
#include <string>

#include "diff/compare.h"

namespace tdiff::report {

// "" for a prefill run.
std::string step_heatmap_html(const CompareResult& r);

}  // namespace tdiff::report
