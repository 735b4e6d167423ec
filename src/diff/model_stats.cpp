#include "diff/model_stats.h"

#include <algorithm>

namespace tdiff {

Quantiles quantiles(std::vector<double>& v) {
  Quantiles q;
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) {
    const double x = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(x);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (x - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  q.p10 = at(0.1), q.p50 = at(0.5), q.p90 = at(0.9);
  return q;
}

}  // namespace tdiff
