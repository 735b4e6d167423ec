#pragma once
// Element errors against the reference's conditioning (exec/conditioning.h): the expected error
// of element i in row ρ is (|r_i| + rms(r)) sqrt(local² + g_ρ² inherited²) sqrt(2 ln n), where
// g_ρ ≥ 1 amplifies what the inputs carry and leaves the stage's own rounding alone. The
// largest ratio over the elements,
//
//   max_ρ  e_ρ / sqrt(local² + g_ρ² inherited²),   e_ρ = max over row ρ of |d_i| / (|r_i| + rms(r)),
//
// depends on local and inherited, which set_expected (expected.h) knows only once every input
// of the stage has been compared. The pass over the pair keeps what that maximum can be reached
// at for any local and inherited: the rows no other row beats with a larger e and a smaller g
// (a Pareto front, a handful of rows), so the verdict needs no second pass over the data.
#include <cstdint>
#include <vector>

#include "base/tensor.h"
#include "casefile/stored_tensor.h"

namespace tdiff {

struct ConditionedRow {
  double err = 0.0;       // e_ρ
  double gain = 1.0;      // g_ρ
  std::int64_t at = -1;   // the flat index of e_ρ's element
};

struct RowConditioning {
  double gain_l2 = 1.0;                // G: amplifies the tensor's relative L2 error
  double max_gain = 1.0;               // the largest g_ρ of the tensor
  std::vector<ConditionedRow> front;   // by increasing gain, with increasing err
};

// The front of `ref` against `cand` (same shape; `ref_rms` = rms(r) as metrics.h has it) under
// the stored row gains. Deterministic for any thread count; non-finite pairs are skipped (the
// metrics count them).
RowConditioning conditioned_rows(const Tensor& ref, const Tensor& cand, double ref_rms, const StoredConditioning& c);

// The largest ratio of the front's rows to their expected error (without the sqrt(2 ln n) tail,
// which the caller applies), and the row that reaches it.
struct ConditionedWorst {
  double ratio = 0.0;
  ConditionedRow row;
};
ConditionedWorst worst_conditioned(const RowConditioning& c, double local, double inherited);

}  // namespace tdiff
