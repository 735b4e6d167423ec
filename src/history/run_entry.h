#pragma once
// One recorded run as the history database keeps it (history/history_db.h): who ran what on
// which build, what it found and how fast it was. `run`, `bisect`, `determinism` and `ci` each
// fill one; `tdiff history` and `tdiff gate` read them back. The case file itself is never
// touched by a record: it holds the inputs and the reference only.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "casefile/env_record.h"
#include "diff/compare.h"

namespace tdiff::history {

inline constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// One compared tensor of a run.
struct StageRecord {
  std::string key;        // "<stage>/<tensor>"
  std::string op_class;   // the stage without its layer ("attn.core"): what the curves group by
  double error = kNone;   // rel_l2 for values, the mismatch share for selections
  double expected = kNone;  // the relative error the formats explain (diff/expected.h); NaN: none
  double ratio = kNone;     // error / expected as judge() saw it; NaN without an expected error
  std::string verdict;      // PASS / WARN / FAIL
};

// The speed of a run: `timed` forwards of the candidate alone after the compared run
// (`tdiff run --timed N`), and whether their outputs are the compared run's (MLPerf's TEST01:
// a speed that was never checked is not a speed of this build's accurate output).
struct SpeedRecord {
  int repeats = 0;               // timed forwards (0: no speed measured)
  double forward_s = kNone;      // median wall seconds of one forward
  double spread_s = kNone;       // the forwards' max - min: the noise a gate allows
  std::int64_t tokens = 0;       // real tokens of the case
  double tokens_per_s = kNone;   // tokens / forward_s
  std::string outputs_sha256;    // of the timed forwards' logits
  // "bitwise" (the compared run's logits, bit for bit), "within thresholds" (other bits, the
  // same verdict against the reference: a nondeterministic build), or "no: <why>".
  std::string verified;
  std::map<std::string, double> class_seconds;  // one profiled forward: seconds per stage class
};

struct RunEntry {
  std::string id;            // the run id ("run-20261207T141501Z-3fa2")
  std::string kind;          // "run", "bisect", "determinism", "ci"
  std::string case_path;     // absolute
  std::string case_name;     // the file's stem
  std::string suite;         // ci's suite name; empty otherwise
  std::string date_utc;      // ISO 8601, the environment record's
  std::string label;         // --label; else the build
  std::string build;         // the candidate's build: tdiff's commit (+"-dirty"), or the engine's
  std::string backend, policy, selections;
  std::string verdict;       // PASS / WARN / FAIL, or the command's own word (determinism)
  std::string first_divergence;
  std::string summary;       // one line: bisect's outcome, determinism's finding, ci's reason
  std::string report_path;   // the report folder, where one was written
  double logits_kl = kNone, logits_top1 = kNone, logits_top10 = kNone;
  SpeedRecord speed;
  std::vector<StageRecord> stages;
  std::vector<std::pair<std::string, double>> timings;  // the command's phases, seconds
  EnvRecord env;
  std::map<std::string, std::string> attrs;  // what the command adds (bisect's culprits, ...)
};

// The per-tensor rows and the logits figures of a judged comparison.
void add_compare(RunEntry& e, const CompareResult& diff);
// The label a run gets without --label: its build, and for tdiff's own backends the policy
// ("a1b2c3d emu fixed"), so runs of one build under two policies stay two series.
std::string default_label(const RunEntry& e);
// The candidate's build as an environment record states it: an engine's own version when its
// dump says so, else tdiff's commit and dirty state.
std::string build_of(const EnvRecord& env);

}  // namespace tdiff::history
