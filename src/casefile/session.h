#pragma once
// A case opened for computing: its inputs, its model's weights and the stage graph. Every
// command that runs the model (golden, run, bisect, ...) starts here.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/case_file.h"
#include "casefile/reference_store.h"
#include "model/stage_graph.h"
#include "formats/weights.h"

namespace tdiff {

struct CaseSession {
  std::string path;
  CaseInfo info;
  std::unique_ptr<WeightStore> weights;
  std::vector<Stage> stages;
  // The case's /reference as this session reads it (casefile/reference_store.h): through the
  // file open_session opened, for the session's lifetime, checked against the case's contract.
  ReferenceStore& reference() const {
    if (!reference_store) reference_store = std::make_shared<ReferenceStore>(path);
    return *reference_store;
  }
  const TensorContract& contract() const { return reference().contract(); }
  mutable std::shared_ptr<ReferenceStore> reference_store;

  RunContext context(TieRule rule = TieRule::lowest_index) { return RunContext{info.config, *weights, info.batch, rule}; }
};

// Opens the case and its model folder (`model_dir` overrides the path the case records). The
// model's config.json must describe the same model as the case (InputError otherwise).
CaseSession open_session(const std::string& case_path, const std::string& model_dir = "");
// The model folder of the case `info` describes (`model_dir` overrides the path it records),
// checked as open_session checks it: InputError when it is missing or describes another model.
std::string case_model_folder(const std::string& case_path, const CaseInfo& info, const std::string& model_dir = "");

TieRule parse_tie_rule(const std::string& text);  // "lowest-index" | "torch-cpu"
const char* tie_rule_name(TieRule r);

}  // namespace tdiff
