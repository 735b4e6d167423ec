#pragma once
// A candidate's tensors that `tdiff run --save` kept (/runs/<run-id> of the case, or of a
// --save-to file), paired with the case's /reference stage by stage (diff/pairing.h) and
// judged under what the run was judged under: its policy's expected errors and its selection
// mode. So `tdiff compare CASE CASE --group-b /runs/<run-id>` gives the verdicts the run gave.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "casefile/session.h"
#include "casefile/stored_tensor.h"
#include "diff/compare.h"
#include "diff/pairing.h"
#include "numerics/policy.h"

namespace tdiff {

struct SavedRun {
  std::string backend;
  std::string policy;      // Policy::describe() of the run's policy
  std::string selections;  // "replay" | "free"
  // What else the run was judged under, so that a compare of it judges the same tensors the
  // same way: its --stages ("" all) and its thresholds file and overrides (none: defaults).
  std::string stages;
  std::string thresholds;
  std::vector<std::string> threshold_overrides;
  // Whether the run was judged with the measured floor (exec/measured_floor.h); runs saved
  // before it existed were not.
  bool measured_floor = false;
  // The group attributes that record it (`tdiff run` writes them; read_saved_run reads them).
  std::vector<std::pair<std::string, std::string>> attrs() const;
};

// The run's attributes on `group` of `file`; nullopt when the group is not a saved run.
std::optional<SavedRun> read_saved_run(const std::string& file, const std::string& group);

// The policy a saved run ran under, rebuilt from its description ("fixed + L02.attn.core:
// softmax_stats=fp16"): the preset or policy file, then each override as `--set` gives it.
Policy saved_run_policy(const SavedRun& run);

// The stages of the case's model, when `file` is a case file (it records a model config).
std::optional<std::vector<Stage>> case_stages(const std::string& file);

// A side of the pairing over "<group>/<key>" of an open file: every tensor read through
// read_stage_tensor (casefile/stored_tensor.h), checked against `contract` as `by` stores it,
// in the contract's shape. Saved runs, floors, dumps and the /reference they are judged
// against are all read through it.
TensorSide stored_side(const H5File& file, const std::string& group, std::shared_ptr<const TensorContract> contract,
                       StoredBy by);
// A case's /reference that stores the layer boundaries (golden --store boundaries) is read
// through a ReferenceStore, which recomputes the stages it lacks from the model the case
// records; any other group is read as stored.
// Whether the case's /reference answers for `key` ("<stage>/<tensor>"): stored, or recomputed.
std::function<bool(const std::string&)> reference_holds(const H5File& case_file,
                                                        std::shared_ptr<const TensorContract> contract);
// The keys of `contract` that `group` of `file` holds (for /reference: reference_holds), in
// contract order.
std::vector<std::string> stored_keys(const H5File& file, const std::string& group, const TensorContract& contract);

// `ref_group` of the case `case_path` against the saved run in `group` of `file`, with the
// case's stages in model order. `session`: the case opened with its model (the routing bias);
// `policy`: the run's (saved_run_policy), for the expected errors. Without either (the model or
// the run's policy file is not at hand) the rows are judged by the scaled rule. Both sides are
// read through stored_side: `ref_group` as the reference stores it when it is /reference.
CompareResult compare_saved_run(const std::string& case_path, const std::string& ref_group, const std::string& file,
                                const std::string& group, const std::vector<Stage>& stages, const SavedRun& run,
                                CaseSession* session, const Policy* policy, CompareOptions opt);

}  // namespace tdiff
