#pragma once
// The measured floor beside the tolerance model (flash-attention's test rule: an output's error
// at most k times a straightforward implementation's in the same precision). tdiff's emu runs
// the case in the candidate's own storage and stream formats, GEMM operands in the storage
// format, every other knob at float32 (on a bf16 port: the fixed preset), on the same inputs and
// the same compared stages, its selections replayed (a free candidate is judged on its own path,
// where a flip adds no error either), and each tensor keeps that run's rel_l2 and
// err_rel (diff/thresholds.h MeasuredFloor). A tolerance verdict then needs both rules: what the
// formats explain a priori, conditioning included, and what emu in those formats measurably
// carries.
#include <string>

#include "casefile/session.h"
#include "diff/compare.h"
#include "exec/mixed_run.h"
#include "numerics/policy.h"

namespace tdiff {

// "fp32 + *:storage=bf16 + *:stream=fp32 + *:matmul_input=bf16" for a bf16 port with float32 streams.
Policy floor_policy(const std::vector<Stage>& stages, const Policy& candidate);

struct FloorRun {
  std::string label;    // the floor policy's description
  double seconds = 0;   // its run
  std::size_t rows = 0; // candidate rows that got a floor
};

// Runs the floor over `session` as `mo` ran the candidate (its compared stages; selections
// replayed; no outputs kept) and sets measured_floor on every float row of `diff` the floor compared.
FloorRun attach_measured_floor(CaseSession& session, const Policy& candidate, const MixedRunOptions& mo,
                               CompareResult& diff);

}  // namespace tdiff
