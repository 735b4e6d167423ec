#pragma once
// The one pairing driver: the tensors of a stage from two sides (a case's /reference, a saved
// run, a candidate dump, a live run's outputs) made into report rows by one function, with one
// rule for what a selection is judged against (diff/selection_scores.h). `tdiff run`, `tdiff
// run --candidate-dump`, `tdiff ci` and `tdiff compare` of a saved run all pair through it, so
// the same tensors get the same rows and, judged by the same thresholds, the same verdicts.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "base/timing.h"
#include "diff/compare.h"
#include "diff/divergence.h"
#include "diff/real_rows.h"
#include "formats/weights.h"
#include "model/stage_graph.h"

namespace tdiff {

// One side, by key "<stage>/<tensor>".
struct TensorSide {
  std::string label;  // the side in the report: "case.h5:/reference", "emu"
  std::string where;  // what a key is prefixed with in messages: "case.h5:/reference/", "emu "
  // The tensor, or an undefined one where this side has none. `like`: the other side's tensor of
  // that key when known (a dump's tensors take its shape, size-1 dimensions aside).
  std::function<Tensor(const std::string& key, const Tensor* like)> read;
  // A case's reference: the conditioning it stores for a key (casefile/stored_tensor.h), which
  // the expected errors are amplified by; unset or nullopt: none.
  std::function<std::optional<StoredConditioning>(const std::string& key)> conditioning;
};

struct PairingRule {
  CompareOptions opt;
  WeightStore* weights = nullptr;  // the routing bias (null: router flips stay unexplained)
  // The rows of a stage's tensor (of that shape) that are judged: a dump's real rows (padding
  // is the implementation's own, diff/real_rows.h); null: all of them.
  std::function<RealRows(const Stage&, const Shape&)> rows;
  // The rows the per-token statistics count (logits' top-1 and KL, a selection's flips): a
  // padded batch's real tokens, so that a backend's report counts tokens as a dump's does. The
  // other metrics keep `rows`. Null: those of `rows`.
  std::function<RealRows(const Stage&, const Shape&)> token_rows;
  // A free-running candidate's tokens that followed their own selection (diff/divergence.h):
  // left out of every later tensor's judged rows, reported apart, and marked by pair_stage as
  // its selections are paired; a selection's own verdict then counts the flips the candidate's
  // scores do not explain. Null: not tracked (selections replayed, stages isolated, no model).
  std::shared_ptr<DivergedTokens> divergence;
  // The candidate's own selections were followed and what they moved is judged on its own path
  // (a followed reference, exec/followed_reference.h; or `divergence`): a selection's verdict
  // counts the flips its own scores do not explain (RoutingMetrics::own_path).
  bool own_path = false;
  PhaseTimes* times = nullptr;  // the comparison's seconds go to kPairingPhase when set
};
inline constexpr const char* kPairingPhase = "compare";

// A row for each output of `s` that both sides hold, in the stage's output order; keys the
// reference holds and the candidate lacks are listed in `r.only_ref`. A selection stage is
// judged with both sides' scores (selection_scores_key, choice_scores).
void pair_stage(const Stage& s, const TensorSide& ref, const TensorSide& cand, const PairingRule& rule, CompareResult& r);

// Every stage of `stages` in model order, for two stored sides. `ref_keys`, `cand_keys`: what
// each side holds (for only_ref / only_cand; keys outside every stage are listed as only_cand
// when the candidate holds them). `rule.opt.stages` filters; InputError when it matches nothing.
CompareResult pair_stages(const std::vector<Stage>& stages, const std::vector<std::string>& ref_keys,
                          const std::vector<std::string>& cand_keys, const TensorSide& ref, const TensorSide& cand,
                          const PairingRule& rule);

// Sides over a file's datasets read through the tensor contract: exec/saved_run.h stored_side.

}  // namespace tdiff
