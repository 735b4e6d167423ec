#include "diff/conditioned_error.h"

#include <algorithm>
#include <cmath>

namespace tdiff {

RowConditioning conditioned_rows(const Tensor& ref, const Tensor& cand, double ref_rms, const StoredConditioning& c) {
  RowConditioning out;
  out.gain_l2 = c.gain_l2;
  const std::int64_t n = ref.numel(), rows = c.row_gain.numel();
  if (rows <= 0 || n % rows != 0) return out;
  const std::int64_t len = n / rows;
  const float* g = c.row_gain.data<float>();
  std::vector<ConditionedRow> per_row(static_cast<std::size_t>(rows));
#pragma omp parallel
  {
    std::vector<double> a(static_cast<std::size_t>(len)), b(static_cast<std::size_t>(len));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t i = 0; i < len; ++i) {
        a[static_cast<std::size_t>(i)] = ref.value(r * len + i);
        b[static_cast<std::size_t>(i)] = cand.value(r * len + i);
      }
      ConditionedRow best{0.0, static_cast<double>(g[r]), -1};
      for (std::int64_t i = 0; i < len; ++i) {
        const double x = a[static_cast<std::size_t>(i)], y = b[static_cast<std::size_t>(i)];
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        const double d = std::fabs(y - x), e = d == 0.0 ? 0.0 : d / (std::fabs(x) + ref_rms);
        if (e > best.err || best.at < 0) best.err = e, best.at = r * len + i;
      }
      per_row[static_cast<std::size_t>(r)] = best;
    }
  }
  for (const auto& r : per_row) out.max_gain = std::max(out.max_gain, r.gain);
  // The front: by increasing gain (then index), each row kept when its err beats every row of
  // a smaller or equal gain before it.
  std::vector<std::size_t> order(per_row.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return per_row[x].gain < per_row[y].gain; });
  double best_err = -1.0;
  for (const std::size_t i : order) {
    if (per_row[i].at < 0 || per_row[i].err <= best_err) continue;
    best_err = per_row[i].err;
    out.front.push_back(per_row[i]);
  }
  return out;
}

ConditionedWorst worst_conditioned(const RowConditioning& c, double local, double inherited) {
  ConditionedWorst w;
  for (const auto& r : c.front) {
    const double scale = std::sqrt(local * local + r.gain * r.gain * inherited * inherited);
    const double ratio = scale > 0 ? r.err / scale : (r.err > 0 ? HUGE_VAL : 0.0);
    if (ratio > w.ratio || w.row.at < 0) w = {ratio, r};
  }
  return w;
}

}  // namespace tdiff
