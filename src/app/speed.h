#pragma once
// The speed half of a recorded run (`run --timed N`, `ci --timed N`): the timed forwards
// (exec/timed_forward.h) summarised as the history keeps them, and verified against the
// compared run (history/run_entry.h SpeedRecord: bitwise, within thresholds, or not).
#include <string>

#include "backend/backend.h"
#include "casefile/session.h"
#include "diff/compare.h"
#include "diff/thresholds.h"
#include "history/run_entry.h"

namespace tdiff::app {

// `repeats` forwards of `candidate` (the compared run's selection mode: `replay`), their
// median, spread and tokens per second, and whether their logits are the compared run's
// (`compared_sha`: its LogitsHash; `compared`: its judged rows, whose logits verdict a build
// with other bits must match against `thresholds`).
history::SpeedRecord measure_speed(CaseSession& session, Backend& candidate, bool replay, int repeats,
                                   const std::string& compared_sha, const CompareResult& compared,
                                   const ThresholdPolicy& thresholds);

// "speed       5 timed forwards: median 0.023 s (spread 0.0041 s), 2872 tokens/s; verified bitwise"
void print_speed(const history::SpeedRecord& s);

}  // namespace tdiff::app
