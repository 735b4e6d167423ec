#pragma once
// The step axis of a generation run against a cache (docs/design/generation.md §2): each float
// tensor with a token axis has its relative error over each step's positions, and that error
// over the tensor's expected one (the a-priori rule's rel part, diff/thresholds.h) names the
// first step and stage past the FAIL ratio: where a cache, a decode kernel or a chunk boundary
// broke the port.
//   step_rel_l2[j] = ‖cand − ref‖₂ / ‖ref‖₂ over rows [begin_j, end_j) of every batch row
//   step ratio     = step_rel_l2[j] / expected.rel
#include <cstddef>
#include <optional>
#include <vector>

#include "base/tensor.h"
#include "model/schedule.h"

namespace tdiff {

struct CompareResult;

// Per step; empty when `steps` is empty or the tensors have no token axis of the steps'
// length (ref [B, S, ...] with S = the last step's end).
std::vector<double> step_rel_l2(const Tensor& ref, const Tensor& cand, const std::vector<ScheduleStep>& steps);

struct StepFinding {
  std::size_t row = 0;   // CompareResult row
  std::size_t step = 0;  // index into CompareResult::steps
  double ratio = 0;      // the step's error over the tensor's expected
  bool fails = false;    // a failing tensor's ratio > its expected_fail
};

// Among the tensors the verdict failed, the earliest step at which one passes its FAIL ratio
// (the first such tensor in stage order); without one, the failing tensors' worst step; in a
// run where nothing failed, the worst step of all (fails = false). A single step is a small
// sample: a passing tensor's step may pass the ratio by chance, so it never names a failing
// step. Empty without steps or expected errors.
std::optional<StepFinding> first_failing_step(const CompareResult& r);
// Two runs' errors of one tensor per step (a bisect's culprit on and off the candidate): the
// first step at which `with` exceeds `factor` times `without`, else the step of the largest
// ratio (found = false); nullopt when the lists are empty or differ in length.
struct StepJump {
  std::size_t step = 0;
  double with = 0, without = 0;
  bool found = false;
};
std::optional<StepJump> first_step_beyond(const std::vector<double>& with, const std::vector<double>& without, double factor);

// The step ratio of a row (NaN without an expected error or a step error).
double step_ratio(const CompareResult& r, std::size_t row, std::size_t step);

}  // namespace tdiff
