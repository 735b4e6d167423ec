#pragma once
// The speed half of the dual curve (`tdiff run --timed N`): the candidate's whole forward
// timed N times after the compared run, and the proof that what was timed is what was judged
// (MLPerf's TEST01): the timed forwards' logits are hashed and matched against the compared
// run's. A build whose timed outputs are other bits (atomics that reorder a sum) is verified
// when its timed logits get the compared run's verdict against the reference; a build whose
// timed outputs fail is not, and its speed is no speed of the accurate build.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/session.h"
#include "exec/mixed_run.h"

namespace tdiff {

struct TimedForwards {
  std::vector<double> seconds;       // each forward's candidate seconds (its stages and its waits)
  std::string logits_sha256;         // of the first timed forward's logits
  bool same_bits = true;             // every timed forward's logits hashed alike
  std::map<std::string, double> class_seconds;  // one profiled forward, synchronized per stage
};

// Hashes the outputs of the logits stages (CompareOptions::logits_patterns) as a run gives
// them to MixedRunOptions::on_outputs; hex() when the run is done.
class LogitsHash {
 public:
  explicit LogitsHash(const std::vector<std::string>& patterns) : patterns_(patterns) {}
  void add(const Stage& s, const std::vector<Tensor>& out);
  std::string hex();

 private:
  std::vector<std::string> patterns_;
  std::vector<std::pair<std::string, std::string>> parts_;  // key, sha256 of its bytes
};

// `repeats` forwards of `candidate` on every stage, with the compared run's selection mode
// (`replay`), then one profiled forward. Nothing but the first stage is compared (the
// reference is read only for replayed selections).
// `on_forward` (optional) is told each forward's number (from 1) and seconds as it ends.
TimedForwards time_forwards(CaseSession& session, Backend& candidate, bool replay, int repeats,
                            const std::function<void(int, double)>& on_forward = {});

// The verdict of the logits of one more forward against the reference, for a build whose timed
// bits differ from the compared run's: the diff rows of the logits stages, unjudged.
CompareResult timed_logits_diff(CaseSession& session, Backend& candidate, bool replay);

}  // namespace tdiff
