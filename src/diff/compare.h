#pragma once
// The diff engine: pairs the tensors of two dumps by name ("<stage>/<tensor>"), computes
// their metrics (metrics.h) and, in a separate step, their verdicts under a policy
// (thresholds.h). Tensors present on one side only are listed in the result, never dropped.
//
//   CompareResult r = compare_files("case.h5", "/reference", "dump.h5", "/", opts);
//   judge(r, load_thresholds("thresholds.toml"));
//   // r.verdict, r.rows[i].verdict, r.first_fail ...
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/schedule.h"
#include "model/stage_names.h"
#include "base/tensor.h"
#include "diff/conditioned_error.h"
#include "diff/location.h"
#include "diff/metrics.h"
#include "diff/systematic.h"
#include "diff/thresholds.h"
#include "diff/token_verdicts.h"

namespace tdiff {

class DivergedTokens;
using NamedTensors = std::map<std::string, Tensor>;  // "<stage>/<tensor>" -> tensor

struct TensorDiff {
  std::string stage, tensor;
  DType dtype_ref = DType::f64, dtype_cand = DType::f64;
  Shape shape;
  TensorKind kind = TensorKind::values;
  TensorMetrics metrics;
  std::optional<LogitsMetrics> logits;
  std::optional<RoutingMetrics> routing;
  // Shapes that differ beyond size-1 dimensions: no metrics (NaN), and judge() FAILs the row.
  std::optional<Shape> shape_cand;
  // Set by judge().
  Verdict verdict = Verdict::pass;
  std::string reason;
  std::optional<double> floor_rmse;  // the noise-floor run's rmse, when one was given
  Thresholds thresholds;             // what the row was judged against (its rules applied)
  // The error the candidate's formats explain (set_expected, diff/expected.h) and, set by
  // judge(), how many times it the row's error is (expected_ratio; NaN without one).
  std::optional<ExpectedError> expected;
  // The rows of the reference's conditioning that can decide the element ratio (pairing of a
  // case's reference that stores one; diff/conditioned_error.h).
  std::optional<RowConditioning> conditioning;
  double tolerance_ratio = std::numeric_limits<double>::quiet_NaN();
  // The measured floor's errors for this tensor (exec/measured_floor.h), and set by judge():
  // the row's ratio to them and which rule decided its verdict ("a priori", "measured floor";
  // empty without a tolerance verdict).
  std::optional<MeasuredFloor> measured_floor;
  double floor_ratio = std::numeric_limits<double>::quiet_NaN();
  std::string decided_by;
  // Per-slice fits of the candidate against the reference (diff/systematic.h), where the
  // tensor's layout is known (a case's contract); judge() FAILs what rounding cannot produce.
  std::optional<SystematicFit> systematic;
  // A free-running candidate's rows of tokens that followed their own selection earlier
  // (diff/divergence.h): left out of every metric above, counted here, with their own rel_l2
  // for values (explained divergence: another valid path, no verdict; NaN for none).
  std::int64_t diverged_rows = 0;
  double diverged_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  // A generation case's logits: the token each predicting row picks (diff/token_verdicts.h),
  // classified by judge().
  std::optional<TokenSteps> tokens;
  // A generation run in steps (CompareOptions::steps): a float tensor with a token axis
  // ([B, S, ...]) has its rel_l2 over each step's positions (diff/step_errors.h); else empty.
  std::vector<double> step_rel_l2;

  std::string key() const { return tensor.empty() ? stage : stage + "/" + tensor; }
};

// A candidate's generation in steps against its own prefill of the same tokens (SGLang's
// p_vs_d check; exec/prefill_vs_decode.h): no reference involved, so a decode path that
// departs from the candidate's own prefill shows apart from the formats' error.
struct PrefillVsDecode {
  std::size_t steps = 0;
  std::string tensor;           // the logits compared
  std::int64_t rows = 0;        // predicting rows (batch rows x positions)
  double max_rel = 0;           // max |steps − prefill| / max |prefill| over those rows
  std::int64_t differing = 0;   // elements not bit-identical
  LogitsMetrics logits;         // top-1 agreement and KL of the steps against the prefill
};

struct CompareResult {
  std::string label_ref, label_cand;             // e.g. "case.h5:/reference"
  std::vector<TensorDiff> rows;                  // model order
  std::vector<std::string> only_ref, only_cand;  // keys found on one side only
  // Set by judge(): the run's verdict (a tensor missing on one side makes it at least WARN)
  // and the first failing row in model order (-1: none).
  Verdict verdict = Verdict::pass;
  int first_fail = -1;
  Thresholds thresholds;  // the policy's defaults (each row carries its own)
  // Padding tokens of the case's batch that the per-token statistics (logits, selections) left
  // out, for the reports to say so (diff/pairing.h token_view); 0: none, or not known.
  std::int64_t padding_tokens = 0;
  // Names elements in the model's terms (diff/location.h); null: no case at hand, plain dimensions.
  std::shared_ptr<const Locator> locator;
  // A free-running candidate's tokens that followed their own selection (diff/divergence.h);
  // null: selections replayed or isolated, nothing tracked.
  std::shared_ptr<const DivergedTokens> divergence;
  // The steps of a generation run against a cache (exec/step_run.h); empty: one prefill.
  std::vector<ScheduleStep> steps;
  std::optional<PrefillVsDecode> p_vs_d;  // run --p-vs-d
};

struct CompareOptions {
  std::vector<std::string> stage_order;  // stage names in model order; unknown stages follow
  std::string stages;                    // glob filter; InputError when it matches nothing
  // A tensor of a stage name gets the metrics of its operator's output kind (op_table.h);
  // these globs pick the logits and routing tensors among keys of other names ("logits").
  std::vector<std::string> logits_patterns = {"lm_head/*", "*/logits", "logits"};
  std::vector<std::string> routing_patterns = {"*.moe.select/*", "*.attn.idx.topk/*"};
  MetricOptions metrics;
  // The run handed the reference's selections to later stages (MixedRunOptions::
  // replay_selections): routing verdicts count only unexplained flips (metrics.h).
  bool replayed_selections = false;
  // The case's tensor contract, which names each stage output's axes: with it, floating-point
  // tensors get per-slice fits (diff/systematic.h); null: none. Outlives the comparison.
  const TensorContract* contract = nullptr;
  // A generation case (model/schedule.h): the positions whose logits predict a generated
  // token; each logits tensor gets token verdicts there. Empty: a prefill case.
  std::vector<std::int64_t> generation_rows;
  // A generation case run in its steps: each float tensor with a token axis gets its error
  // per step (TensorDiff::step_rel_l2). Empty: none.
  std::vector<ScheduleStep> steps;
};

// "L03.attn.core/o" -> {"L03.attn.core", "o"}; a key without '/' is a stage of its own.
std::pair<std::string, std::string> split_key(const std::string& key);
// Keys sorted by model order: `stage_order` first; otherwise by part (stage_part: prologue,
// layers by number, head), by name inside each part.
std::vector<std::string> order_keys(std::vector<std::string> keys, const std::vector<std::string>& stage_order);


// Dataset paths under `group`, relative to it ("L03.attn.core/o"), as compare_files pairs them.
std::vector<std::string> list_keys(const std::string& file, const std::string& group);

// One pair. Shapes equal once size-1 dimensions are dropped ([1,200] and [200]) compare as the
// reference's shape; other shapes give a row with `shape_cand` set. `ref_scores`: the reference's selection scores for routing tie detection;
// `cand_scores`: the candidate's, to count flips its own score error explains.
TensorDiff diff_tensor(const std::string& key, const Tensor& ref, const Tensor& cand, const CompareOptions& opt,
                       const Tensor* ref_scores = nullptr, const Tensor* cand_scores = nullptr);
// Per-slice fits of a floating-point row whose key the contract of `opt` knows (nothing
// otherwise). `choices`: for moe.experts, the reference's expert ids of the same rows.
void fit_systematic(TensorDiff& row, const Tensor& ref, const Tensor& cand, const CompareOptions& opt,
                    const Tensor* choices = nullptr);
// The key of the reference's expert choice that slices `stage`'s tensors by expert ("" none).
std::string expert_choice_key(const std::string& stage, const TensorContract& contract);
// Name-only pairings (dumps without a model; the stage driver is diff/pairing.h): a selection's
// scores by selection_scores_key of its name.
CompareResult compare_maps(const NamedTensors& ref, const NamedTensors& cand, const CompareOptions& opt = {});
// Reads one pair at a time, so memory stays at the size of the largest pair.
CompareResult compare_files(const std::string& file_ref, const std::string& group_ref, const std::string& file_cand,
                            const std::string& group_cand, const CompareOptions& opt = {});

// Verdicts for every row and for the run. `floor`: a noise-floor run compared against the
// same reference; rows it lacks are judged without the floor gate.
void judge(CompareResult& r, const ThresholdPolicy& policy, const CompareResult* floor = nullptr);

}  // namespace tdiff
