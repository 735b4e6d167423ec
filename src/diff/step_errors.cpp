#include "diff/step_errors.h"

#include <cmath>
#include <limits>

#include "diff/compare.h"

namespace tdiff {

std::vector<double> step_rel_l2(const Tensor& ref, const Tensor& cand, const std::vector<ScheduleStep>& steps) {
  if (steps.empty() || ref.rank() < 2 || ref.dim(1) != steps.back().end || cand.numel() != ref.numel()) return {};
  const Tensor r = ref.dtype() == DType::f64 ? ref : ref.to(DType::f64), c = cand.dtype() == DType::f64 ? cand : cand.to(DType::f64);
  const double* rp = r.data<double>();
  const double* cp = c.data<double>();
  const std::int64_t B = ref.dim(0), S = ref.dim(1), row = ref.numel() / (B * S);
  std::vector<double> out;
  out.reserve(steps.size());
  for (const ScheduleStep& st : steps) {
    double diff = 0, norm = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = (b * S + st.begin) * row; i < (b * S + st.end) * row; ++i) {
        if (!std::isfinite(rp[i]) || !std::isfinite(cp[i])) continue;  // −∞ scores of entries not yet visible
        diff += (cp[i] - rp[i]) * (cp[i] - rp[i]);
        norm += rp[i] * rp[i];
      }
    out.push_back(norm > 0 ? std::sqrt(diff / norm) : (diff > 0 ? std::numeric_limits<double>::infinity() : 0.0));
  }
  return out;
}

std::optional<StepJump> first_step_beyond(const std::vector<double>& with, const std::vector<double>& without,
                                          double factor) {
  if (with.empty() || with.size() != without.size()) return std::nullopt;
  std::optional<StepJump> largest;
  double largest_ratio = -1;
  for (std::size_t j = 0; j < with.size(); ++j) {
    if (with[j] > factor * without[j]) return StepJump{j, with[j], without[j], true};
    const double ratio = without[j] > 0 ? with[j] / without[j] : (with[j] > 0 ? HUGE_VAL : 1.0);
    if (ratio > largest_ratio) largest_ratio = ratio, largest = StepJump{j, with[j], without[j], false};
  }
  return largest;
}

double step_ratio(const CompareResult& r, std::size_t row, std::size_t step) {
  const TensorDiff& d = r.rows.at(row);
  if (!d.expected || d.expected->rel <= 0 || step >= d.step_rel_l2.size()) return std::numeric_limits<double>::quiet_NaN();
  return d.step_rel_l2[step] / d.expected->rel;
}

std::optional<StepFinding> first_failing_step(const CompareResult& r) {
  bool any_fail = false;
  for (const auto& d : r.rows) any_fail = any_fail || d.verdict == Verdict::fail;
  std::optional<StepFinding> worst;
  for (std::size_t j = 0; j < r.steps.size(); ++j)
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
      // A single step is a small sample of a tensor: only a tensor the verdict failed is
      // searched for its failing step, so that a passing run never names one.
      if (any_fail && r.rows[i].verdict != Verdict::fail) continue;
      const double ratio = step_ratio(r, i, j);
      if (std::isnan(ratio)) continue;
      if (any_fail && ratio > r.rows[i].thresholds.expected_fail) return StepFinding{i, j, ratio, true};
      if (!worst || ratio > worst->ratio) worst = StepFinding{i, j, ratio, false};
    }
  return worst;
}

}  // namespace tdiff
