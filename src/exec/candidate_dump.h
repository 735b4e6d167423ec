#pragma once
// An implementation nobody here wrote as the candidate: its dump (python/ capture, the tap of
// src/tap/tap.h, or `tdiff run --save`) judged stage by stage against the case's reference,
// with the report a tdiff backend gets.
//
// A dump holds "<stage>/<tensor>" datasets under one group (default "/"), and optionally the
// attributes tdiff_dump_mode ("run": the implementation's own forward; "isolated": each stage
// on the reference's inputs from the case) and env.* (its environment record). Checked before
// anything is compared, so a bad dump is one error naming the tensor (InputError):
//   - every name is under a stage of the case's model (tdiff info CASE --stages); a tensor a
//     stage does not produce (a capture's helper, e.g. moe.select/idx_sorted) is listed
//     (CandidateDump::extra) and not compared;
//   - its shape equals the reference's once size-1 dimensions are dropped ([1,200] is [200]);
//   - its dtype can hold what the reference holds: floats for values, integers for selection
//     indices, bool or integer for masks.
// Stages the dump lacks are listed, not errors: hooks rarely reach every stage.
#include <map>
#include <string>
#include <vector>

#include "model/stage_graph.h"
#include "formats/weights.h"
#include "diff/compare.h"

namespace tdiff {

struct CandidateDump {
  std::string path, group;
  std::string mode = "run";                 // "run" | "isolated"
  std::map<std::string, std::string> env;   // env.* attributes, without the prefix
  std::string written_on;                   // the case file it was written on (attribute "case"; tdiff-capture's), or ""
  std::vector<std::string> keys;            // "<stage>/<tensor>", checked stage outputs
  std::vector<std::string> extra;           // tensors under a stage that it does not produce
  std::vector<std::string> lacking_stages;  // stages with a stored reference and no tensor in the dump
};

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
