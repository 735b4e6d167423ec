#pragma once
// tdiff determinism --tp-sweep: the candidate (emu) under each tensor-parallel size and
// all-reduce order, every stage against the float64 reference and against the unsplit run;
// a vacuity check (the inputs must be able to reveal a reordering of the ranks' sum) and a
// repeat of every pinned order that must give the same bits.
#include <cstdint>
#include <string>
#include <vector>

#include "casefile/session.h"
#include "diff/compare.h"
#include "numerics/policy.h"

namespace tdiff::app {

struct TpSweepOptions {
  std::vector<int> sizes;           // tensor-parallel sizes (1 is the unsplit baseline, always run)
  std::vector<std::string> orders;  // all-reduce orders (ring, tree, fixed, custom1, custom2)
  std::uint64_t seed = 1;
  std::string stages;               // globs of the stage outputs to print ("" : the reduced ones and the logits)
  bool all_rows = false;            // print every stage output
};

struct TpSweepOutcome {
  CompareResult table;  // per configuration, its reduced tensors against the reference
  bool ok = true;
  std::string verdict, summary;
  std::string configs;  // "tp=2 ring, tp=4 ring, ..." for the record
};

TpSweepOutcome run_tp_sweep(CaseSession& session, const Policy& base, const TpSweepOptions& opt);

}  // namespace tdiff::app
