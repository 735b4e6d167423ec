#pragma once
// Error over depth: the residual stream's relative error at every layer's output (the
// hyper-connection streams after the layer's FFN, `Lxx.hc_ffn.post`), the error the candidate's
// formats explain there, and how much each layer multiplied it by. Whether a port's error
// compounds (a constant growth factor > 1 over 43 layers is 1.05^43 = 8.5x) or stays additive
// is what a 2-4 layer case cannot show; report.html and report.json carry it.
#include <string>
#include <vector>

#include "diff/compare.h"

namespace tdiff::report {

struct DepthRow {
  int layer = 0;
  std::size_t row = 0;    // the CompareResult row
  double rel_l2 = 0;      // the stream's relative error
  double expected = -1;   // the formats' (diff/expected.h); < 0: none
  double growth = -1;     // rel_l2 / the previous layer's; < 0: the first layer, or 0 before
};

// One row per layer whose output stream was compared, in layer order; empty with fewer than 2.
std::vector<DepthRow> error_over_depth(const CompareResult& r);
// The geometric mean of the growth factors (< 0 without any).
double mean_growth(const std::vector<DepthRow>& rows);

std::string depth_html(const CompareResult& r);

}  // namespace tdiff::report
