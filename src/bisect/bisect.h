#pragma once
// The bisector (docs/design/design.md §7): which candidate stage makes the watched output fail?
//
//   first culprit  the smallest k such that stages 1..k on the candidate (the rest on the
//                  reference, or on the floor: BisectOptions::suffix) make the watched output FAIL: a binary search over k between a
//                  known PASS (k = 0, the reference itself) and the all-candidate run, so
//                  ceil(log2 N) mixed runs after the all-candidate one;
//   culprit set    the culprits found so far pinned to the reference, the search repeated
//                  until the candidate passes (one more mixed run confirms it) or
//                  max_culprits is reached;
//   isolation      every candidate stage on the reference's own inputs, ranked by local error;
//   attribution    all stages of one operator class on the candidate at once, the rest on the
//                  reference: the share of the final error that class explains.
//
// The watched verdict. A bisection of a fault needs an error budget that the candidate
// without the fault meets: the noise floor, the same backend under a known-good policy
// (`fixed` by default) with the same run seed. Every mixed run has a floor companion: the
// floor backend on the same split (cheap: the floor's stages come from its cache, only the
// reference suffix is recomputed). The watched tensor is judged as `tdiff run` judges a
// tensor against a noise floor (diff/thresholds.h), where the floor is
//   - the companion itself when the candidate's watched output equals it bit for bit (the
//     candidate computes what the floor computes on this split: ratio 1, PASS), and
//   - otherwise the smaller error of the companion and the all-floor run (a companion that
//     flips a near-tie routing choice of its own must not hide a fault),
// so the watched tensor FAILs when its rmse > floor_k x that floor's rmse + floor_atol
// (floor_k = 3 unless --threshold floor_k=... says otherwise), when a threshold fires that
// the floor passes with that margin (thresholds that floor_k times the floor's error would
// cross cannot tell the candidate from noise the gate accepts and are switched off; for
// integer tensors the mismatch budget becomes floor_k times the floor's share), or on a
// NaN/Inf the reference lacks.
// When the candidate differs from the floor only at some stages (a fault injected on top of
// the floor's policy), every split before the first of them computes the same bits as its
// companion and passes without any margin for noise. Right behind the culprit the floor has
// accumulated the least noise, so a fault that fails the all-candidate run fails there too,
// and the search lands on it. Faults that fail only together with later candidate stages
// (whose rounding then tips a near-tie router) are named where the output starts to fail,
// which is what "first culprit" means. Without a floor, the thresholds alone judge.
//
// The suffix on the floor (Suffix::floor). Stages k+1..N run on the floor backend instead
// of the float64 reference: a port engineer's own move (swap in the known-good kernels on the
// same device), and at real widths the difference between a GPU forward (milliseconds) and
// the reference recomputing every layer after the split on the CPU (seconds a layer). Every
// split's companion is then the all-floor run itself (floor prefix + floor suffix), so a
// probe is one mixed run and no companion; a split before the fault computes the all-floor
// run's bits and passes as identical, one at or after it carries the fault's error through
// the floor's stages. The watched tensor is judged by the floor gate alone there: the
// expected-error rule models the reference's exact suffix, not the floor's.
//
// Mixed runs reuse the case's /reference for reference stages whose inputs are unchanged and
// keep every other stage output in a StageCache, so the search computes each stage about
// once per distinct upstream assignment.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/mixed_run.h"
#include "exec/stage_cache.h"
#include "backend/backend.h"
#include "casefile/session.h"
#include "diff/compare.h"
#include "diff/thresholds.h"

namespace tdiff {

// The watched output: one tensor of one stage, or every output of the stage.
struct Watch {
  std::size_t index = 0;  // in the stage list
  std::string stage;
  std::string tensor;     // empty: every output of the stage
  std::string key() const { return tensor.empty() ? stage : stage + "/" + tensor; }
  bool matches(const TensorDiff& d) const { return d.stage == stage && (tensor.empty() || d.tensor == tensor); }
};
// "logits" (lm_head/logits), "STAGE" or "STAGE/tensor"; InputError naming the unknown
// stage or tensor otherwise.
Watch resolve_watch(const std::vector<Stage>& stages, const std::string& spec);

// The watched tensor of one run, judged.
struct WatchedError {
  TensorDiff diff;              // candidate vs reference: metrics, verdict and the reasons that fired
  bool has_floor = false;
  bool identical = false;       // the candidate's watched output equals the companion's bit for bit
  double companion_error = 0;   // the floor companion's error (same split)
  double floor_error = 0;       // the all-floor run's error
  double error() const { return error_of(diff); }
  // The floor the error was judged against (see above).
  double budget_base() const { return identical ? companion_error : std::min(companion_error, floor_error); }
  // error / budget_base (1 when identical, +inf when only the base is 0); 0 without a floor.
  double vs_floor() const {
    if (!has_floor) return 0.0;
    if (identical) return 1.0;
    const double b = budget_base();
    return b > 0 ? error() / b : error() > 0 ? HUGE_VAL : 1.0;
  }
  // rmse for floats, mismatch share for integer tensors.
  static double error_of(const TensorDiff& d) {
    if (d.kind != TensorKind::exact && d.kind != TensorKind::routing) return d.metrics.rmse;
    if (d.routing) return d.routing->mismatch_share;
    return d.metrics.count ? static_cast<double>(d.metrics.n_diff) / static_cast<double>(d.metrics.count) : 0.0;
  }
};

// One mixed run of the trace.
struct Probe {
  int step = 0;                     // 1-based
  std::string phase;                // "full", "search", "verify", "class"
  std::size_t prefix = 0;           // full/search/verify: stages [0, prefix) on the candidate ...
  std::vector<std::size_t> pinned;  // ... except these, pinned to the reference
  std::string group;                // class: the operator class on the candidate
  std::string split;                // the stages on the candidate: "1-77 (embed .. L02.attn.q_a) but L01.attn.core"
  WatchedError watched;
  std::size_t on_candidate = 0, computed = 0, reused = 0, cached = 0;
  double seconds = 0;
  // Where they went: the mixed run's phases (exec/mixed_run.h), its floor companion's behind
  // "floor " (the first probe's also hold the all-floor run's), and "judge".
  PhaseTimes times;
  Verdict verdict() const { return watched.diff.verdict; }
};

struct Culprit {
  std::size_t index = 0;
  std::string stage, cls;
  int pass_step = 0, fail_step = 0;  // the probes that bracket it (0: known without a run)
};

struct SearchResult {
  bool full_fails = false;    // false: nothing crosses the threshold
  std::vector<Culprit> culprits;
  bool passes_after = false;  // the candidate with the culprits pinned passes
  bool capped = false;        // stopped at max_culprits with the candidate still failing
};

struct IsolatedStage {
  std::size_t index = 0;
  std::string stage, cls;
  TensorDiff worst;                   // the stage's worst output (local error), judged
  std::optional<double> floor_error;  // the floor candidate's local error of the same tensor
  double score = 0;  // ranking key: error / floor error with a floor, else rel_l2 (mismatch share for ids)
};
struct IsolationResult {
  std::vector<IsolatedStage> ranked;  // FAIL first, then by score, highest first
  CompareResult diff;                 // every isolated output, in model order (for the run report)
  double seconds = 0;
};

enum class Grouping { stage_class, op_kind };  // Stage::op_class or op_kind_name()
struct ClassShare {
  std::string group;
  std::size_t stages = 0;
  int step = 0;           // the probe
  WatchedError watched;   // with only this class on the candidate (and its floor companion)
  // error^2 / the sum over classes of error^2: the share of the squared error this class
  // produces alone (independent errors add in quadrature). The shares sum to 1 by construction.
  double share = 0;
  double vs_all = 0;  // error / the all-candidate run's error (above 1: the classes interact)
};
struct AttributionResult {
  Grouping by = Grouping::stage_class;
  double all_error = 0;            // the all-candidate run's watched error
  std::vector<ClassShare> rows;    // highest share first
  // sqrt(sum of the classes' squared errors) / all_error: about 1 when the classes' errors are
  // independent, far from 1 when they interact (near-tie routing flips, cancellation).
  double quadrature = 0;
};

struct BisectTotals {
  int mixed_runs = 0;     // candidate mixed runs (the probes of the trace)
  int floor_runs = 0;     // the all-floor run and the companions of the probes
  int isolated_runs = 0;  // isolation: stages run on the reference's inputs
  std::size_t computed = 0, reused = 0, cached = 0;  // stage executions over all runs
  double seconds = 0;
};

// What runs the stages after a split (see above).
enum class Suffix { reference, floor };

struct BisectOptions {
  std::string watch = "logits";
  Suffix suffix = Suffix::reference;  // floor: needs set_floor()
  ThresholdPolicy thresholds;
  std::size_t max_culprits = 8;
  // Selection replay in every mixed run, the candidate's and the floor's (exec/mixed_run.h):
  // the stages after a candidate expert or indexer choice get the reference's, so a near-tie
  // flip (the floor's or the candidate's) cannot move the watched error by O(1) on one split
  // and not on the next. Knobs that act only through a choice then leave the output alone.
  bool replay_selections = false;
  std::size_t cache_bytes = std::size_t{2} << 30;  // per stage cache (the candidate's and the floor's)
  std::function<void(const Probe&)> on_probe;  // after every mixed run
  // Before each piece of work: ("all-floor run", 0, 0), ("step 3 search: 1-40 (...)", 0, 0),
  // ("L01.attn.core", 12, 77) while isolating stage 12 of 77.
  std::function<void(const std::string& what, std::size_t done, std::size_t total)> on_progress;
};

class Bisector {
 public:
  // The session, backends and context must outlive the bisector.
  Bisector(CaseSession& session, Backend& candidate, Backend& reference, RunContext& ctx, BisectOptions opt);

  // The noise floor: `floor` (same backend kind, known-good policy, same run seed) run over
  // the same stages, compared with the reference. Run on first use; not a mixed run.
  void set_floor(Backend& floor);
  bool has_floor() const { return floor_backend_ != nullptr; }
  // Whether the stages after a split run on the floor (BisectOptions::suffix with a floor set).
  bool floor_suffix() const { return opt_.suffix == Suffix::floor && floor_backend_ != nullptr; }
  const CompareResult* floor_diff();  // null without a floor

  const Watch& watch() const { return watch_; }
  std::size_t stage_count() const { return watch_.index + 1; }  // N: the stages that can matter
  const std::vector<Stage>& stages() const { return session_.stages; }

  // The all-candidate mixed run with every stage compared (judged with the floor), for the
  // run's report; the first probe of search().
  const CompareResult& full_run();
  SearchResult search();
  IsolationResult isolate();
  AttributionResult attribute(Grouping by);

  const std::vector<Probe>& trace() const { return trace_; }
  BisectTotals totals() const { return totals_; }
  // What the bisector decided on its own (thresholds switched off because the floor fails them).
  const std::vector<std::string>& notes() const { return notes_; }
  const ThresholdPolicy& thresholds() const { return thresholds_; }

 private:
  // One mixed run: stages with `on_candidate` set run on the candidate; records the probe.
  const Probe& probe(std::string phase, const std::vector<bool>& on_candidate, std::string split,
                     std::size_t prefix, std::vector<std::size_t> pinned, std::string group = "",
                     bool compare_all = false);
  using Outputs = std::map<std::string, Tensor>;  // the watched tensors of a run, by key
  // Judges `diff` against the floor companion (null: the thresholds alone); returns the watched tensor.
  WatchedError judge_watched(CompareResult& diff, const Outputs& outputs, const CompareResult* companion,
                             const Outputs* companion_outputs);
  // Runs a split with every stage (or only the watched one) compared; `watched` receives its outputs.
  MixedRunResult run_split(Backend& backend, StageCache& cache, const std::vector<bool>& on_candidate, bool compare_all,
                           Outputs& watched);
  std::vector<bool> prefix_assignment(std::size_t prefix, const std::vector<std::size_t>& pinned) const;
  std::string prefix_split(std::size_t prefix, const std::vector<std::size_t>& pinned) const;
  void ensure_floor();
  void say(const std::string& what, std::size_t done, std::size_t total) const;  // opt_.on_progress

  CaseSession& session_;
  Backend& candidate_;
  Backend& reference_;
  RunContext& ctx_;
  BisectOptions opt_;
  Watch watch_;
  ThresholdPolicy thresholds_;  // opt_.thresholds, relaxed where the all-floor run fails them
  Backend* floor_backend_ = nullptr;
  std::optional<CompareResult> floor_;
  Outputs floor_watched_;  // the all-floor run's watched tensors
  std::optional<CompareResult> full_;
  StageCache cache_, floor_cache_;
  std::vector<Probe> trace_;
  BisectTotals totals_;
  std::vector<std::string> notes_;
  PhaseTimes step_times_;  // of the probe under way (Probe::times)
};

// Adds, for every tensor of `floor` (judged under `policy`), a rule that switches off the
// thresholds that floor_k times the floor's error would cross there (the gate allows that
// much: 1 - cosine and KL, quadratic in the error, scale by floor_k^2; integer tensors:
// mismatch_fail = floor_k x its share); returns the keys touched.
std::vector<std::string> relax_for_floor(ThresholdPolicy& policy, const CompareResult& floor);

}  // namespace tdiff
