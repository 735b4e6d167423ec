#pragma once
// A mixed run (docs/design/design.md §7): a chosen set of stages on the candidate backend, the rest
// on the reference, tensors converted at every boundary; every stage output compared with the
// case's /reference as it is produced. A plain candidate run is the mixed run with every stage
// on the candidate.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/session.h"
#include "base/timing.h"
#include "diff/compare.h"

namespace tdiff {

class StageCache;

struct MixedRunOptions {
  std::string compare;       // stages whose outputs are diffed (globs; empty: all)
  CompareOptions diff;       // metric options (stage_order is filled in)
  bool reuse_reference = true;  // reference stages whose inputs are unchanged read /reference instead of recomputing
  std::size_t end = SIZE_MAX;   // run stages [0, end) only (nothing after a watched stage matters)
  StageCache* cache = nullptr;  // outputs of earlier mixed runs with the same upstream assignment (bisect/stage_cache.h)
  // Selection replay: the candidate's expert and indexer choices (moe.select, attn.idx.topk)
  // are compared, then the reference's are handed to the stages after them, so every later
  // stage is judged on the same discrete choices as the reference and a near-tie flip cannot
  // move a whole token downstream. Verdicts then judge a selection only by the flips its own
  // scores do not explain (diff/metrics.h). Off: the candidate follows its own choices.
  // With `cache`: the candidate's selection stages are always run (never taken from the
  // cache) so that their choices are compared and replaced; every other cached output was
  // computed on replayed choices, so one cache serves runs of one replay setting only.
  bool replay_selections = false;
  // Without replay: the candidate's outputs are compared with the reference that follows its
  // choices (exec/followed_reference.h: one more reference forward from the first flip on), so
  // a near-tie it broke otherwise moves nothing a verdict reads. Off (bisect's free runs): with
  // /reference, every flip's consequences included.
  bool follow_selections = false;
  // Expected errors (diff/expected.h) judged end to end: every input carries its modelled
  // error, not the one this run measured (a bisect's watched output); otherwise each stage is
  // judged on what it adds to its inputs' measured errors.
  bool end_to_end = false;
  // The phase the stages off the candidate count under (kPhaseReference; a bisect with the
  // floor after its splits: kPhaseFloor).
  const char* rest_phase = nullptr;
  // A generation case runs in its schedule's steps against a cache (exec/step_run.h) when
  // every backend of the run runs steps; `as_prefill` runs it as one prefill instead.
  bool as_prefill = false;
  std::function<void(const Stage&, std::size_t index)> progress;
  // Generation steps as they end (step index, step count).
  std::function<void(std::size_t step, std::size_t steps)> on_step;
  // Every stage's outputs, for callers that keep or store them.
  std::function<void(const Stage&, const std::vector<Tensor>&)> on_outputs;
};

struct MixedRunResult {
  CompareResult diff;  // metrics only; the caller judges (thresholds)
  std::size_t on_candidate = 0, on_reference = 0;  // stage counts
  std::size_t reused = 0;  // reference stages read from the case's /reference
  std::size_t cached = 0;  // stages taken from MixedRunOptions::cache
  std::size_t replayed = 0;                // selection stages given the reference's choices
  std::vector<std::string> not_replayed;   // selection stages replay skipped: no stored reference
  std::size_t steps = 0;  // generation steps run against the cache (0: one prefill)
  double seconds = 0;
  // Where the seconds went (kMixedRunPhases; base/timing.h), for `tdiff run`'s and bisect's
  // timing lines.
  PhaseTimes times;
};

// The phases of MixedRunResult::times: the candidate's stages (an asynchronous backend:
// launching them), waiting for its copies (Backend::finish), the reference backend's stages,
// reading /reference, comparing, and the on_outputs callback (run --save: writing them).
inline constexpr const char* kPhaseCandidate = "candidate";
inline constexpr const char* kPhaseFinish = "finish";
inline constexpr const char* kPhaseReference = "reference stages";
inline constexpr const char* kPhaseFloor = "floor stages";
inline constexpr const char* kPhaseReadRef = "reference reads";
inline constexpr const char* kPhaseCompare = "compare";
inline constexpr const char* kPhaseOutputs = "outputs";

// `on_candidate[i]`: stage i of session.stages runs on `candidate`. Needs the case's
// /reference (tdiff golden) for every compared stage; InputError naming the stage otherwise.
MixedRunResult run_mixed(CaseSession& session, Backend& candidate, Backend& reference,
                         const std::vector<bool>& on_candidate, RunContext& ctx, const MixedRunOptions& opt);

}  // namespace tdiff
