#pragma once
// An implementation nobody here wrote as the candidate: its dump (python/ capture, the tap of
// src/tap/tap.h, or `tdiff run --save`) judged stage by stage against the case's reference,
// with the report a tdiff backend gets.
//
// A dump holds "<stage>/<tensor>" datasets under one group (default "/"), and optionally the
// attributes tdiff_dump_mode ("run": the implementation's own forward, its own selections
// followed, the tokens they moved judged apart (diff/divergence.h); "replay": its own forward
// with the reference's expert and indexer choices handed to the stages after each selection,
// its own choices recorded, judged as `tdiff run --selections replay` judges a backend;
// "isolated": each stage on the reference's inputs from the case) and env.* (its environment
// record). Checked before
// anything is compared, so a bad dump is one error naming the tensor (InputError):
//   - a dump that records the case file it was written on (attribute "case") was written on
//     this case (check_dump_case);
//   - every name is under a stage of the case's model (tdiff info CASE --stages); a tensor a
//     stage does not produce (a capture's helper, e.g. moe.select/idx_sorted) is listed
//     (CandidateDump::extra) and not compared;
//   - its shape is the case's tensor contract's (model/tensor_contract.h) once size-1
//     dimensions are dropped ([1,200] is [200]);
//   - its dtype can hold what the contract says: floats for values, integers for selection
//     indices, bool or integer for masks.
//   - a stage it names (a tensor or a group under the stage's name) it holds whole: every
//     output of that stage (check_named_stages; an lm_head without logits was skipped, exit 0).
// Its selections are checked against their range when they are read (casefile/stored_tensor.h).
// Stages the dump lacks are listed, not errors: hooks rarely reach every stage.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "casefile/case_file.h"
#include "model/stage_graph.h"
#include "model/tensor_contract.h"
#include "formats/weights.h"
#include "diff/compare.h"

namespace tdiff {

struct CandidateDump {
  std::string path, group;
  std::string mode = "run";                 // "run" | "replay" | "isolated"
  std::map<std::string, std::string> env;   // env.* attributes, without the prefix
  std::string written_on;                   // the case file it was written on (attribute "case"; tdiff-capture's), or ""
  std::string inputs_sha256;                // that case's inputs (attribute case_inputs_sha256: model/batch.h), or ""
  std::vector<std::string> keys;            // "<stage>/<tensor>", checked stage outputs
  std::vector<std::string> extra;           // tensors under a stage that it does not produce
  std::vector<std::string> lacking_stages;  // stages with a stored reference and no tensor in the dump
  // The case and the dump as open_candidate_dump opened them: every later read goes through
  // these handles, against this contract.
  std::optional<H5File> case_file, file;
  CaseInfo case_info;
  std::shared_ptr<const TensorContract> contract;
};

// One rule for `tdiff run --candidate-dump` and `tdiff ci --candidate-dumps`: a dump that
// records the hash of the inputs it was written on (`inputs_sha256`; the tap's with
// tdiff_tap_case) was written on this case's inputs, wherever either file travelled. A dump
// that records the case file it was written on (`written_on`; tdiff-capture's do) was written
// on the case `case_file` holds. With that file at hand its inputs (token ids and mask) must be
// this case's: a copy or a move of the case passes, another case of the same shapes does not
// (the cases of a golden set share them). Without it (the dump travelled) the file names must
// agree. InputError naming the dump and both files otherwise.
void check_dump_case(const CandidateDump& dump, const H5File& case_file, const Batch& batch);

// A stage that `group` of `file` names (holds a tensor of, or a group for) is there whole: an
// InputError naming the first output of it missing, among those `required` accepts ("stage/
// tensor"). Stages of `stages` only: other names are the caller's to judge. `tdiff run
// --candidate-dump`, `ci --candidate-dumps` and `compare` where the model is known.
void check_named_stages(const H5File& file, const std::string& group, const std::vector<Stage>& stages,
                        const std::function<bool(const std::string& key)>& required);

// Reads the dump's names, shapes and dtypes (no tensor data) and checks them against
// `stages` and the case's /reference.
CandidateDump open_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages, const std::string& path,
                                  const std::string& group = "/");

// Every tensor of the dump against the reference, in model order, on real tokens only (padding
// positions are the implementation's own: diff/real_rows.h); tensors of a padded batch are
// judged as [real rows, ...]. Selections are judged as in
// a backend's run, from both sides' scores where stored (diff/selection_scores.h); the router's
// bias is read from `weights` (null when the model is not at hand: router flips then stay
// unexplained). `opt.stage_order` is filled in from `stages`.
CompareResult compare_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages,
                                     const CandidateDump& dump, WeightStore* weights, CompareOptions opt = {});

// An isolated dump's tensors ranked by local error, as `tdiff bisect --mode isolate --floor
// none` ranks a backend's stages: worse verdicts first, then the larger error (local_error).
std::vector<const TensorDiff*> rank_by_local_error(const CompareResult& diff);
// rel_l2 for values; for selections, the share of tokens with another choice.
double local_error(const TensorDiff& d);

}  // namespace tdiff
